package porch_test

// This file holds one example and nothing else but the middleware it
// defines, so that go doc and the site show the whole file: a Middleware is
// a type with methods, which an example function cannot declare inside it.

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/writeonce/porch-go/porch"
)

// stamp is a Middleware that refuses requests without a token and stamps
// every response it saw.
type stamp struct{}

func (stamp) Before(r *http.Request) (*http.Request, *porch.Response) {
	if r.Header.Get("Token") == "" {
		return r, porch.Problem{Type: "https://example.test/no-token", Title: "Unauthorized", Status: http.StatusUnauthorized}.Response()
	}
	return r, nil
}

func (stamp) After(r *http.Request, res *porch.Response, _ porch.Completion) {
	res.SetHeader("X-Stamped", "yes")
}

func ExampleChain() {
	h := porch.Chain(stamp{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello")
	}))

	for _, token := range []string{"", "t0k3n"} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("Token", token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("X-Stamped"), strings.TrimSpace(rec.Body.String()))
	}
	// Output:
	// 401 yes {"type":"https://example.test/no-token","title":"Unauthorized","status":401}
	// 200 yes hello
}
