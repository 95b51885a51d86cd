package idem_test

import (
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/internal/pgtest/pgstore"
	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/postgres"
)

// withLocation answers 201 with a Location, two Links and the headers
// created sets (Set-Cookie, X-Custom), which no option may replay.
func withLocation(n int64, w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Location", fmt.Sprintf("/orders/%d", n))
	w.Header().Add("Link", "</a>; rel=a")
	w.Header().Add("Link", "</b>; rel=b")
	created(n, w, r)
}

func TestKeepHeaders(t *testing.T) {
	tests := []struct {
		name string
		keep []string
		want http.Header // the replay's headers of those the handler set, Content-Type aside
	}{
		{"default: Content-Type only", nil, http.Header{}},
		{"Location", []string{"Location"}, http.Header{"Location": {"/orders/1"}}},
		{"names are case-insensitive, repeats and Content-Type ignored",
			[]string{"location", "LOCATION", "content-type"}, http.Header{"Location": {"/orders/1"}}},
		{"every value of a header, in order", []string{"Link", "Location"},
			http.Header{"Location": {"/orders/1"}, "Link": {"</a>; rel=a", "</b>; rel=b"}}},
		{"a header the handler did not set", []string{"ETag"}, http.Header{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := &orders{fn: withLocation}
			e := newEnv(t, envConfig{opt: idem.Options{KeepHeaders: tc.keep}}, o)
			first := e.do(t, http.MethodPost, "/orders", "one", "k")
			second := e.do(t, http.MethodPost, "/orders", "one", "k")
			if !second.replayed() || second.status != first.status {
				t.Fatalf("second: got %s replayed=%v, want a replay of %s", second, second.replayed(), first)
			}
			if got, want := second.header.Get("Content-Type"), "application/json"; got != want {
				t.Errorf("Content-Type: got %q, want %q", got, want)
			}
			got := http.Header{}
			for _, h := range []string{"Location", "Link", "Etag", "Set-Cookie", "X-Custom"} {
				if v := second.header.Values(h); len(v) > 0 {
					got[h] = v
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("replayed headers: got %v, want %v", got, tc.want)
			}
		})
	}
}

// A stored header is replayed only while KeepHeaders names it: dropping a
// name (say a header found to leak) stops its replay at once, for rows
// stored before too.
func TestKeepHeadersFollowsTheOption(t *testing.T) {
	st := openStore(t, store.Options{})
	o := &orders{fn: withLocation}
	before := newEnvOn(t, st, envConfig{opt: idem.Options{KeepHeaders: []string{"Location", "Link"}}}, o)
	if got := before.do(t, http.MethodPost, "/orders", "one", "k"); got.header.Get("Location") == "" {
		t.Fatalf("first: got no Location, want the handler's")
	}
	after := newEnvOn(t, st, envConfig{opt: idem.Options{KeepHeaders: []string{"Link"}}}, o)
	got := after.do(t, http.MethodPost, "/orders", "one", "k")
	if !got.replayed() {
		t.Fatalf("got %s, want a replay", got)
	}
	if v := got.header.Values("Location"); len(v) != 0 {
		t.Errorf("Location: got %q, want none", v)
	}
	if v, want := got.header.Values("Link"), []string{"</a>; rel=a", "</b>; rel=b"}; !slices.Equal(v, want) {
		t.Errorf("Link: got %q, want %q", v, want)
	}
}

// The headers are stored, not kept in memory: PostgreSQL replays them from
// another instance.
func TestPostgresKeepHeaders(t *testing.T) {
	dsn := pgtest.DSN(t)
	opt := envConfig{opt: idem.Options{KeepHeaders: []string{"Location"}}}
	o := &orders{fn: withLocation}
	a := newEnvOn(t, pgstore.Open(t, dsn, postgres.Options{}), opt, o)
	b := newEnvOn(t, pgstore.Open(t, dsn, postgres.Options{}), opt, o)
	a.do(t, http.MethodPost, "/orders", "one", "k")
	got := b.do(t, http.MethodPost, "/orders", "one", "k")
	if !got.replayed() || got.header.Get("Location") != "/orders/1" {
		t.Errorf("replay on the other instance: got %s replayed=%v Location %q, want a replay with /orders/1",
			got, got.replayed(), got.header.Get("Location"))
	}
}
