// Package logctx picks the logger for a line porch logs about a request:
// the middleware's own, else the one [porch.App] put in the request's
// context, else slog.Default(), with the request ID chi's
// middleware.RequestID assigned, when it ran.
package logctx

import (
	"context"
	"log/slog"

	"github.com/go-chi/chi/v5/middleware"
)

type key struct{}

// With returns ctx carrying l, for Logger.
func With(ctx context.Context, l *slog.Logger) context.Context {
	return context.WithValue(ctx, key{}, l)
}

// Logger returns l, or if nil the logger With put in ctx, or if none
// slog.Default() as of this call; with a "request_id" attribute when chi's
// middleware.RequestID ran for ctx's request. It allocates only on the
// logging path, never on a request's normal one.
func Logger(ctx context.Context, l *slog.Logger) *slog.Logger {
	if ctx == nil {
		ctx = context.Background()
	}
	if l == nil {
		l, _ = ctx.Value(key{}).(*slog.Logger)
	}
	if l == nil {
		l = slog.Default()
	}
	if id := middleware.GetReqID(ctx); id != "" {
		return l.With("request_id", id)
	}
	return l
}
