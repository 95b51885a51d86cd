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
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// Brute-force protection: three failed logins per user an hour. A
// successful login is given back once its handler answered 200; a failed
// one stands; once three have failed, the user is refused, right password
// or not, without running the handler.
func ExampleOptions_countStatus() {
	dir, err := os.MkdirTemp("", "porch-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	st, err := sqlite.Open(filepath.Join(dir, "app.db"), store.Options{})
	if err != nil {
		panic(err)
	}
	defer st.Close(context.Background())
	pool := porch.NewPool(porch.PoolOptions{})
	defer pool.Close(context.Background())

	logins, err := rate.New(pool, st, 3, time.Hour, rate.Options{
		Name:        "login",
		KeyFunc:     rate.KeyByHeader("X-User"),
		CountStatus: rate.Failures, // only 4xx and 5xx answers count
	})
	if err != nil {
		panic(err)
	}
	defer logins.Close(context.Background())
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
