package idem_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/internal/pgtest/pgstore"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/postgres"
)

// eachShared runs test with two stores sharing one database, as two
// instances would: SQLite's one store twice (two middlewares in one
// process), and two PostgreSQL stores on one schema.
func eachShared(t *testing.T, test func(t *testing.T, a, b driver.KeyStore)) {
	t.Run("sqlite", func(t *testing.T) {
		st := openStore(t, store.Options{})
		test(t, st, st)
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := pgtest.DSN(t)
		test(t, pgstore.Open(t, dsn, postgres.Options{}), pgstore.Open(t, dsn, postgres.Options{}))
	})
}

// A support tool looks a key up by the principal or the address its
// requests were scoped by, and forgets a stored answer so that the
// client's corrected retry runs; a key in flight, on this middleware or
// another instance's, is reported as such and is not forgotten.
func TestLookupAndForget(t *testing.T) {
	eachShared(t, func(t *testing.T, sa, sb driver.KeyStore) {
		g := newGate()
		o := &orders{fn: func(n int64, w http.ResponseWriter, r *http.Request) {
			if n == 1 {
				g.hold()
				w.WriteHeader(http.StatusBadRequest) // stored: the default stores 4xx
				return
			}
			w.WriteHeader(http.StatusCreated)
		}}
		opt := idem.Options{TTL: time.Hour, Principal: porch.KeyByHeader("X-Account")}
		a := idem.New(newPool(t, porchOptions()), sa, opt)
		b := idem.New(newPool(t, porchOptions()), sb, opt) // another instance
		ha := a.Handler(o)
		t.Cleanup(g.open)
		ctx := t.Context()
		acct := idem.Scope{Principal: "acct-7"}
		post := func(key, addr, account string) int {
			req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("x"))
			req.Header.Set(idem.Header, key)
			req.RemoteAddr = addr
			if account != "" {
				req.Header.Set("X-Account", account)
			}
			rec := httptest.NewRecorder()
			ha.ServeHTTP(rec, req)
			return rec.Code
		}
		phase := func(m *idem.Keys, sc idem.Scope, key string) idem.KeyState {
			t.Helper()
			st, err := m.Lookup(ctx, sc, key)
			if err != nil {
				t.Fatalf("lookup: %v", err)
			}
			return st
		}

		if got := phase(a, acct, "k").Phase; got != idem.KeyAbsent {
			t.Fatalf("before any request: got %v, want absent", got)
		}
		owner := make(chan int, 1)
		go func() { owner <- post("k", "192.0.2.1:1", "acct-7") }()
		g.waitEntered(t)
		for name, m := range map[string]*idem.Keys{"this middleware": a, "another instance": b} {
			if got := phase(m, acct, "k").Phase; got != idem.KeyInFlight {
				t.Errorf("%s: key in flight: got %v, want in_flight", name, got)
			}
			if err := m.Forget(ctx, acct, "k"); !errors.Is(err, idem.ErrKeyInFlight) {
				t.Errorf("%s: forget in flight: got %v, want ErrKeyInFlight", name, err)
			}
		}
		g.open()
		if code := <-owner; code != http.StatusBadRequest {
			t.Fatalf("owner: got %d, want 400", code)
		}

		st := phase(b, acct, "k")
		// PostgreSQL reads its clock once for each: a millisecond may pass.
		if ttl := st.Expires.Sub(st.Created); st.Phase != idem.KeyStored || st.Status != http.StatusBadRequest ||
			ttl < time.Hour || ttl > time.Hour+time.Second {
			t.Fatalf("stored: got %+v, want stored 400 expiring an hour after it was created", st)
		}
		if code := post("k", "192.0.2.1:1", "acct-7"); code != http.StatusBadRequest || o.calls.Load() != 1 {
			t.Fatalf("retry before forgetting: got %d after %d calls, want the stored 400 and 1 call", code, o.calls.Load())
		}
		if got := phase(a, idem.Scope{Principal: "acct-8"}, "k").Phase; got != idem.KeyAbsent {
			t.Errorf("another principal's key: got %v, want absent", got)
		}
		if err := b.Forget(ctx, acct, "k"); err != nil {
			t.Fatalf("forget: %v", err)
		}
		if got := phase(a, acct, "k").Phase; got != idem.KeyAbsent {
			t.Errorf("after forget: got %v, want absent", got)
		}
		if err := a.Forget(ctx, acct, "k"); err != nil {
			t.Errorf("forget of an absent key: got %v, want nil", err)
		}
		if code := post("k", "192.0.2.1:1", "acct-7"); code != http.StatusCreated || o.calls.Load() != 2 {
			t.Fatalf("retry after forgetting: got %d after %d calls, want 201 and 2 calls", code, o.calls.Load())
		}

		// Without a principal, by the address: an IPv6 client by its /64.
		post("v6", "[2001:db8:1:2::5]:1234", "")
		for _, addr := range []string{"2001:db8:1:2::99", "[2001:db8:1:2::5]:80", "2001:db8:1:2::/64"} {
			if got := phase(b, idem.Scope{Addr: addr}, "v6"); got.Phase != idem.KeyStored || got.Status != http.StatusCreated {
				t.Errorf("by address %s: got %+v, want stored 201", addr, got)
			}
		}
		if got := phase(b, idem.Scope{Addr: "2001:db8:1:3::5"}, "v6").Phase; got != idem.KeyAbsent {
			t.Errorf("another /64: got %v, want absent", got)
		}
	})
}

// Lookup and Forget refuse what names no key: a Scope with both fields or
// neither, a key no request could carry.
func TestLookupRefuses(t *testing.T) {
	m := idem.New(newPool(t, porchOptions()), openStore(t, store.Options{}), idem.Options{})
	for _, tc := range []struct {
		scope idem.Scope
		key   string
	}{
		{idem.Scope{}, "k"},
		{idem.Scope{Principal: "p", Addr: "192.0.2.1"}, "k"},
		{idem.Scope{Principal: "p"}, ""},
		{idem.Scope{Principal: "p"}, strings.Repeat("k", idem.MaxKeyLen+1)},
		{idem.Scope{Principal: "p"}, "é"},
	} {
		if _, err := m.Lookup(context.Background(), tc.scope, tc.key); err == nil {
			t.Errorf("Lookup(%+v, %q): got no error", tc.scope, tc.key)
		}
		if err := m.Forget(context.Background(), tc.scope, tc.key); err == nil {
			t.Errorf("Forget(%+v, %q): got no error", tc.scope, tc.key)
		}
	}
}
