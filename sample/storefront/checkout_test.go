package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestDecodeCheckout(t *testing.T) {
	long := `{"sku":"` + strings.Repeat("x", maxCheckoutBody) + `","qty":1}`
	tests := []struct {
		name       string
		body       string
		wantStatus int // 0: accepted
		want       checkoutRequest
	}{
		{"order", `{"sku":"mug","qty":2}`, 0, checkoutRequest{"mug", 2}},
		{"whitespace around", " \n{\"sku\":\"mug\",\"qty\":2}\r\n\t ", 0, checkoutRequest{"mug", 2}},
		{"exactly the cap", `{"sku":"mug","qty":2}` + strings.Repeat(" ", maxCheckoutBody-21), 0, checkoutRequest{"mug", 2}},
		{"stray ]", `{"sku":"mug","qty":2}]`, http.StatusBadRequest, checkoutRequest{}},
		{"stray }", `{"sku":"mug","qty":2}}`, http.StatusBadRequest, checkoutRequest{}},
		{"second object", `{"sku":"mug","qty":2}{"sku":"mug","qty":2}`, http.StatusBadRequest, checkoutRequest{}},
		{"trailing garbage", `{"sku":"mug","qty":2} x`, http.StatusBadRequest, checkoutRequest{}},
		{"trailing NUL", "{\"sku\":\"mug\",\"qty\":2}\x00", http.StatusBadRequest, checkoutRequest{}},
		{"unknown field", `{"sku":"mug","qty":2,"price":0}`, http.StatusBadRequest, checkoutRequest{}},
		{"not an object", `["mug"]`, http.StatusBadRequest, checkoutRequest{}},
		{"null", `null`, http.StatusBadRequest, checkoutRequest{}},
		{"empty", ``, http.StatusBadRequest, checkoutRequest{}},
		{"qty 0", `{"sku":"mug","qty":0}`, http.StatusBadRequest, checkoutRequest{}},
		{"qty 1001", `{"sku":"mug","qty":1001}`, http.StatusBadRequest, checkoutRequest{}},
		{"qty fraction", `{"sku":"mug","qty":1.5}`, http.StatusBadRequest, checkoutRequest{}},
		{"no sku", `{"qty":1}`, http.StatusBadRequest, checkoutRequest{}},
		{"over the cap in the object", long, http.StatusRequestEntityTooLarge, checkoutRequest{}},
		{"over the cap after the object", `{"sku":"mug","qty":2}` + strings.Repeat(" ", maxCheckoutBody), http.StatusRequestEntityTooLarge, checkoutRequest{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, bad := decodeCheckout(capped(tc.body))
			switch {
			case tc.wantStatus == 0 && bad != nil:
				t.Fatalf("got %d %s, want it accepted", bad.Status, bad.Detail)
			case tc.wantStatus == 0 && got != tc.want:
				t.Errorf("got %+v, want %+v", got, tc.want)
			case tc.wantStatus != 0 && bad == nil:
				t.Errorf("got %+v accepted, want %d", got, tc.wantStatus)
			case tc.wantStatus != 0 && bad.Status != tc.wantStatus:
				t.Errorf("got %d %s, want %d", bad.Status, bad.Detail, tc.wantStatus)
			}
		})
	}
}

// capped is body behind the cap the checkout handler puts on it.
func capped(body string) io.Reader {
	return http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(strings.NewReader(body)), maxCheckoutBody)
}
