package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/writeonce/porch-go/porch"
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

// failingBody yields prefix, then fails with err, as a connection does.
type failingBody struct {
	prefix string
	err    error
}

func (b *failingBody) Read(p []byte) (int, error) {
	if b.prefix != "" {
		n := copy(p, b.prefix)
		b.prefix = b.prefix[n:]
		return n, nil
	}
	return 0, b.err
}

// A body whose read fails is refused for the read: 408 when it stalled
// past the server's read timeout, 400 when the connection failed, and
// never with the error's text, which names the server's socket addresses.
func TestDecodeRefusesAFailedReadPlainly(t *testing.T) {
	addr := func(port int) net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port} }
	opErr := func(err error) error {
		return &net.OpError{Op: "read", Net: "tcp", Source: addr(8080), Addr: addr(51234), Err: err}
	}
	decoders := map[string]func(io.Reader) *porch.Problem{
		"checkout": func(r io.Reader) *porch.Problem { _, p := decodeCheckout(r); return p },
		"login":    func(r io.Reader) *porch.Problem { _, p := decodeLogin(r); return p },
	}
	tests := []struct {
		name       string
		err        error
		wantStatus int
	}{
		{"stalled past the read timeout", opErr(os.ErrDeadlineExceeded), http.StatusRequestTimeout},
		{"connection reset", opErr(syscall.ECONNRESET), http.StatusBadRequest},
	}
	for name, decode := range decoders {
		for _, tc := range tests {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				p := decode(&failingBody{prefix: `{"sku":`, err: tc.err})
				if p == nil {
					t.Fatalf("got it accepted, want %d", tc.wantStatus)
				}
				if p.Status != tc.wantStatus {
					t.Errorf("got %d %s, want %d", p.Status, p.Detail, tc.wantStatus)
				}
				for _, leak := range []string{"127.0.0.1", "8080", "51234", "tcp"} {
					if strings.Contains(p.Detail, leak) {
						t.Errorf("detail %q carries %q from the error, want a plain one", p.Detail, leak)
					}
				}
			})
		}
	}
}
