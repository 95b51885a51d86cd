package porch_test

import (
	"context"
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

func ExampleReply() {
	p := porch.NewPool(porch.PoolOptions{Size: 4})
	defer p.Close(context.Background())

	// counts[shard] is touched only by that shard's actor: no lock.
	counts := make([]map[string]int, p.Size())
	for i := range counts {
		counts[i] = make(map[string]int)
	}
	hit := func(key string) int {
		reply := porch.NewReply[int]()
		err := p.Send(key, func(shard int) {
			counts[shard][key]++
			reply.Send(counts[shard][key], nil)
		})
		if err != nil {
			panic(err) // ErrSaturated: a server answers 503
		}
		n, err := reply.Wait(context.Background())
		if err != nil {
			panic(err)
		}
		return n
	}
	fmt.Println(hit("alice"), hit("alice"), hit("bob"), hit("alice"))
	// Output: 1 2 1 3
}
