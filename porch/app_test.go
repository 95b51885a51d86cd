package porch_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"testing"

	"github.com/writeonce/porch-go/porch"
)

func TestAppServeShutsDownAndRunsClosersInReverse(t *testing.T) {
	app := porch.New()
	app.Get("/ping", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "pong") })
	var closed []string // closers run on Serve's goroutine; read after it returns
	errStore := errors.New("store close failed")
	app.OnShutdown(func(context.Context) error { closed = append(closed, "pool"); return nil })
	app.OnShutdown(func(context.Context) error { closed = append(closed, "store"); return errStore })

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { served <- app.Serve(ctx, l) }()

	res, err := http.Get("http://" + l.Addr().String() + "/ping")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(body) != "pong" {
		t.Errorf("got body %q, want %q", body, "pong")
	}

	stop()
	if err := <-served; !errors.Is(err, errStore) {
		t.Errorf("got Serve = %v, want the closer's error", err)
	}
	// Registered pool first, store second: the store closes last.
	if want := []string{"store", "pool"}; !slices.Equal(closed, want) {
		t.Errorf("got closers run %v, want %v", closed, want)
	}
	if err := app.Close(context.Background()); err != nil || len(closed) != 2 {
		t.Errorf("got a second Close = %v running %v, want nil running nothing more", err, closed)
	}
}
