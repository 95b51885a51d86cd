package fail_test

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/go-chi/chi/v5/middleware"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/clock"
	"github.com/writeonce/porch-go/porch/internal/errlog"
	"github.com/writeonce/porch-go/porch/internal/fail"
)

// A store failure porch logs about a request carries the request ID chi's
// middleware.RequestID gave it. App.Logger, rate.Options.Logger,
// idem.Options.Logger all choose where the line goes.
func ExampleDetail() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // keep the example's output stable
			}
			return a
		},
	}))
	errs := errlog.New(clock.System{}, 0, logger)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		detail := fail.Detail(errs, r, "count this request", errors.New("disk full"))
		porch.Unavailable("https://example.com/problems/unavailable", detail, time.Second).Write(w)
	})
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set(middleware.RequestIDHeader, "req-42") // as a proxy in front may set it
	middleware.RequestID(h).ServeHTTP(httptest.NewRecorder(), req)
	// Output:
	// level=ERROR msg="porch: could not count this request" request_id=req-42 err="disk full"
}
