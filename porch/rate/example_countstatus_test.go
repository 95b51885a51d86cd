package rate_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/kit"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// Brute-force protection: three failed logins per user an hour. A
// successful login is given back once its handler answered 200; a failed
// one stands; once three have failed, the user is refused, right password
// or not, without running the handler.
func ExampleOptions_countStatus() {
	dir, _ := os.MkdirTemp("", "porch-example")
	defer os.RemoveAll(dir)
	k := kit.Must(kit.Open(sqlite.Open(filepath.Join(dir, "app.db"), sqlite.Options{})))
	defer k.Close(context.Background()) // the limiters, the pool, the store: in that order

	logins, err := k.Limiter(3, time.Hour, rate.Options{
		Name:        "login",
		KeyFunc:     porch.KeyByHeader("X-User"),
		CountStatus: rate.Failures, // only 4xx and 5xx answers count
	})
	if err != nil {
		panic(err)
	}
	h := logins.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("password") != "secret" {
			http.Error(w, "wrong password", http.StatusUnauthorized)
		}
	}))

	for _, password := range []string{"secret", "guess", "secret", "guess", "guess", "secret"} {
		req := httptest.NewRequest(http.MethodPost, "/login?password="+password, nil)
		req.Header.Set("X-User", "ann")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Println(password, rec.Code)
	}
	v, _ := logins.Peek(context.Background(), "ann")
	fmt.Println("remaining:", v.Remaining)
	// Output:
	// secret 200
	// guess 401
	// secret 200
	// guess 401
	// guess 401
	// secret 429
	// remaining: 0
}
