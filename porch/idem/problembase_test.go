package idem_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/writeonce/porch-go/porch/idem"
)

// Every problem the middleware answers with moves under ProblemBase, the
// 503 included; its status and headers stay.
func TestProblemBase(t *testing.T) {
	const base = "https://api.example.test/problems/"
	under := func(typ string) string { return base + strings.TrimPrefix(typ, "https://porch.dev/problems/") }
	o := new(orders)
	e := newEnv(t, envConfig{opt: idem.Options{
		RequireKey: true, ProblemBase: base, Fingerprint: idem.CanonicalJSON,
	}}, o)

	wantProblem(t, e.do(t, http.MethodPost, "/orders", `{}`), http.StatusBadRequest, under(idem.ProblemKeyRequired))
	wantProblem(t, e.do(t, http.MethodPost, "/orders", `{}`, "a\tb"), http.StatusBadRequest, under(idem.ProblemKeyInvalid))
	wantProblem(t, e.do(t, http.MethodPost, "/orders", `{`, "k"), http.StatusBadRequest, under(idem.ProblemBodyInvalid))
	e.do(t, http.MethodPost, "/orders", `{"n":1}`, "k")
	wantProblem(t, e.do(t, http.MethodPost, "/orders", `{"n":2}`, "k"), http.StatusUnprocessableEntity,
		under(idem.ProblemKeyReused))

	e.pool.Close(context.Background()) // every later request is refused
	got := e.do(t, http.MethodPost, "/orders", `{}`, "k2")
	wantProblem(t, got, http.StatusServiceUnavailable, under(idem.ProblemUnavailable))
	wantRetryAfter(t, got)
}
