package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// fuzzCap stands in for maxCheckoutBody while fuzzing: the cap's logic is
// the same at any size, and the fuzzer stalls minimizing 64 KiB inputs.
const fuzzCap = 128

// FuzzDecodeCheckout checks the checkout's reading of its body: an accepted
// body is one JSON object within the cap and nothing after it but
// whitespace, holding a sku and a qty in range, and it reads back the same
// once re-encoded; a refusal is 400, or 413 only for a body over the cap;
// a body over the cap is never accepted.
func FuzzDecodeCheckout(f *testing.F) {
	for _, seed := range []string{
		`{"sku":"mug","qty":1}`, ` {"sku":"tea-green","qty":1000} ` + "\n", `{"sku":"mug","qty":1}]`, `{"sku":"mug","qty":1}}`,
		`{"sku":"mug","qty":1}{}`, `{"sku":"mug","qty":1} x`, `{"sku":"mug","qty":0}`, `{"sku":"mug","qty":1.0}`,
		`{"sku":"mug","qty":1e2}`, `{"sku":"","qty":1}`, `{"SKU":"mug","QTY":1}`, `{"sku":"mug","qty":1,"qty":2}`,
		`{"sku":"\ud800","qty":1}`, "{\"sku\":\"\xff\",\"qty\":1}", `{"sku":"mug","qty":1,"x":1}`, `{"sku":null,"qty":1}`,
		`null`, `[]`, `"mug"`, ``, `{`, `{"sku":"mug","qty":-1}`, `{"sku":"mug","qty":9223372036854775808}`,
		`{"sku":"mug","qty":1}` + strings.Repeat(" ", fuzzCap), `{"sku":"` + strings.Repeat("x", fuzzCap) + `","qty":1}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, bad := decodeCheckout(http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(bytes.NewReader(body)), fuzzCap))
		if bad != nil {
			switch {
			case bad.Status == http.StatusRequestEntityTooLarge && len(body) <= fuzzCap:
				t.Fatalf("%q (%d bytes): got 413, want it only over the %d-byte cap", body, len(body), fuzzCap)
			case bad.Status != http.StatusBadRequest && bad.Status != http.StatusRequestEntityTooLarge:
				t.Fatalf("%q: got %d, want 400 or 413", body, bad.Status)
			}
			return
		}
		if len(body) > fuzzCap {
			t.Fatalf("a %d-byte body accepted over the %d-byte cap", len(body), fuzzCap)
		}
		if trimmed := bytes.TrimLeft(body, " \t\r\n"); len(trimmed) == 0 || trimmed[0] != '{' || !json.Valid(body) {
			t.Fatalf("%q accepted: want one JSON object and only whitespace after it", body)
		}
		if req.SKU == "" || req.Qty < 1 || req.Qty > 1000 {
			t.Fatalf("%q accepted as %+v: want a sku and a qty of 1 to 1000", body, req)
		}
		again, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		if back, bad := decodeCheckout(bytes.NewReader(again)); bad != nil || back != req {
			t.Fatalf("%q accepted as %+v; re-encoded %s reads back as %+v, %v", body, req, again, back, bad)
		}
	})
}
