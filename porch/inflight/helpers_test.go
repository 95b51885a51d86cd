package inflight_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/internal/redistest"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/memory"
	"github.com/writeonce/porch-go/porch/store/postgres"
	"github.com/writeonce/porch-go/porch/store/redis"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// storeKind opens a store of one kind. open returns a function that opens
// another store on the same database (a second instance), or nil for a
// store only one process counts in.
type storeKind struct {
	name   string
	shared bool
	open   func(t *testing.T) (store.Slots, func(t *testing.T) store.Slots)
}

var kinds = []storeKind{
	{name: "memory", open: func(t *testing.T) (store.Slots, func(t *testing.T) store.Slots) {
		st, err := memory.Open()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close(context.Background()) })
		return st, nil
	}},
	{name: "sqlite", open: func(t *testing.T) (store.Slots, func(t *testing.T) store.Slots) {
		st, err := sqlite.Open(filepath.Join(t.TempDir(), "porch.db"), sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close(context.Background()) })
		return st, nil
	}},
	{name: "postgres", shared: true, open: func(t *testing.T) (store.Slots, func(t *testing.T) store.Slots) {
		dsn := pgtest.DSN(t)
		another := func(t *testing.T) store.Slots {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			// A bound a loaded machine cannot reach: these tests check
			// counts, and a timed-out acquire would be a 503 in them.
			st, err := postgres.Open(ctx, dsn, postgres.Options{Timeout: 20 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close(context.Background()) })
			return st
		}
		return another(t), another
	}},
	{name: "redis", shared: true, open: func(t *testing.T) (store.Slots, func(t *testing.T) store.Slots) {
		c := redistest.Client(t)
		prefix := redistest.Prefix(t, c)
		another := func(t *testing.T) store.Slots {
			st, err := redis.Open(context.Background(), c, redis.Options{Prefix: prefix, Timeout: redistest.StoreTimeout})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close(context.Background()) })
			return st
		}
		return another(t), another
	}},
}

// newPool makes a pool closed when t ends.
func newPool(t *testing.T, opt porch.PoolOptions) *porch.Pool {
	t.Helper()
	p := porch.NewPool(opt)
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

// gate is a handler that records how many of its requests run at once,
// and holds each until open is called.
type gate struct {
	mu      sync.Mutex // protects running and most
	running int
	most    int
	entered chan struct{}
	release chan struct{}
}

func newGate() *gate {
	return &gate{entered: make(chan struct{}, 1024), release: make(chan struct{})}
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	g.running++
	g.most = max(g.most, g.running)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.running--
		g.mu.Unlock()
	}()
	g.entered <- struct{}{}
	select {
	case <-g.release:
	case <-r.Context().Done():
	}
	w.WriteHeader(http.StatusCreated)
}

func (g *gate) open() { close(g.release) }

func (g *gate) peak() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.most
}

// get sends a GET from one client to srv and returns the response.
func get(t *testing.T, srv *httptest.Server) *http.Response {
	t.Helper()
	res, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res
}
