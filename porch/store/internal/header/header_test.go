package header_test

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/writeonce/porch-go/porch/store/internal/header"
)

func TestRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		in   http.Header
		want http.Header
	}{
		{"nil", nil, nil},
		{"empty", http.Header{}, nil},
		{"one", http.Header{"Location": {"/orders/1"}}, http.Header{"Location": {"/orders/1"}}},
		{"several values keep their order", http.Header{"Link": {"<a>", "<b>"}, "Etag": {`"x"`}},
			http.Header{"Link": {"<a>", "<b>"}, "Etag": {`"x"`}}},
		{"bytes beyond ASCII", http.Header{"X-Name": {"caf\xe9 \xff"}}, http.Header{"X-Name": {"caf\xe9 \xff"}}},
		{"a value with ': ' in it", http.Header{"X-Note": {"a: b"}}, http.Header{"X-Note": {"a: b"}}},
		{"newlines become spaces, as net/http sends them", http.Header{"X-Note": {"a\r\nb\nc"}},
			http.Header{"X-Note": {"a b c"}}},
		{"an empty value", http.Header{"X-Empty": {""}}, http.Header{"X-Empty": {""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			enc := header.Encode(tt.in)
			if enc == nil {
				t.Fatal("got Encode = nil, want a non-nil slice (the column is NOT NULL)")
			}
			if got := header.Decode(enc); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %q, want %q (encoded %q)", got, tt.want, enc)
			}
		})
	}
}

// The encoding is what an operator reads in the column.
func TestEncodeIsSortedLines(t *testing.T) {
	got := string(header.Encode(http.Header{"Location": {"/o/1"}, "Etag": {`"v1"`}}))
	if want := "Etag: \"v1\"\nLocation: /o/1\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
