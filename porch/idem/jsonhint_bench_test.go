package idem_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/writeonce/porch-go/porch/idem"
)

// BenchmarkKeyedJSONBody measures a keyed request (a replay, so that the
// store does little) whose body is JSON of many two-member objects, the
// shape whose canonical form costs the most per byte: at 4 KiB, the most
// whose canonical form is hashed for the 422's FingerprintJSON hint, and at
// 64 KiB, past that, beside a JSON string of 64 KiB, which never is. The
// 64 KiB cases should cost about the same: a body past the hint's cap is
// only hashed, so a client cannot make every keyed request canonicalise
// what the rate limiter let through.
func BenchmarkKeyedJSONBody(b *testing.B) {
	for _, bc := range []struct {
		name string
		body []byte
	}{
		{"objects 4KiB", jsonObjects(4 << 10)},
		{"objects 64KiB", jsonObjects(64 << 10)},
		{"string 64KiB", []byte(`"` + strings.Repeat("x", 64<<10-2) + `"`)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h, _ := benchChain(b)
			if w := benchPostBody(h, "k", bc.body); w.Code != http.StatusOK {
				b.Fatalf("store the response: got status %d, want 200", w.Code)
			}
			b.SetBytes(int64(len(bc.body)))
			b.ReportAllocs()
			for b.Loop() {
				if w := benchPostBody(h, "k", bc.body); w.Code != http.StatusOK || w.Header().Get(idem.ReplayedHeader) != "true" {
					b.Fatalf("got status %d, %s %q; want a 200 replay", w.Code, idem.ReplayedHeader, w.Header().Get(idem.ReplayedHeader))
				}
			}
		})
	}
}

// jsonObjects is a JSON array of {"b":0,"a":0} of at most n bytes.
func jsonObjects(n int) []byte {
	const unit = `{"b":0,"a":0}`
	return []byte("[" + strings.Repeat(unit+",", (n-2)/(len(unit)+1)-1) + unit + "]")
}

// benchPostBody runs one POST of body through h with key, and returns the
// recorder.
func benchPostBody(h http.Handler, key string, body []byte) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/orders", bytes.NewReader(body))
	r.Header.Set(idem.Header, key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}
