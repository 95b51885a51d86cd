package idem_test

import (
	"context"
	"encoding/hex"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/internal/pgtest/pgstore"
	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/postgres"
)

// incompressible is n bytes of hex that PostgreSQL cannot compress into
// an index row, as it would a run of one letter.
func incompressible(n int) string {
	rng := rand.New(rand.NewChaCha8([32]byte{}))
	b := make([]byte, n/2)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return hex.EncodeToString(b)
}

// hostilePrincipals are principals whose scoped keys a text column, its
// index or a UTF-8 check refuses, and principals that differ only far in.
func hostilePrincipals() []string {
	long := incompressible(10 << 10)
	return []string{"\xff", "a\x00b", "\x00", "\xc3\x28", "\xed\xa0\x80", long, long[:len(long)-1] + "q", "plain"}
}

// checkHostilePrincipals posts key k1 once for each principal (the
// principal named by ?p=, since a header cannot carry a NUL), all at once,
// then again: each principal's handler runs exactly once and its repeat
// replays its own response, not another principal's.
func checkHostilePrincipals(t *testing.T, open func(t *testing.T) driver.KeyStore) {
	principals := hostilePrincipals()
	var calls [8]atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, _ := strconv.Atoi(r.URL.Query().Get("p"))
		calls[i].Add(1)
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte("order for " + strconv.Itoa(i)))
	})
	opt := idem.Options{RequireKey: true, Principal: func(r *http.Request) (string, error) {
		i, _ := strconv.Atoi(r.URL.Query().Get("p"))
		return principals[i], nil
	}}
	e := newEnvOn(t, open(t), envConfig{opt: opt}, h)
	for round := range 2 {
		var wg sync.WaitGroup
		results := make([]result, len(principals))
		for i := range principals {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
				defer cancel()
				r, err := e.send(ctx, http.MethodPost, "/pay?p="+strconv.Itoa(i), "{}", "k1")
				if err != nil {
					t.Errorf("principal %d: %v", i, err)
				}
				results[i] = r
			}()
		}
		wg.Wait()
		for i, r := range results {
			want := "order for " + strconv.Itoa(i)
			if r.status != http.StatusCreated || string(r.body) != want || r.replayed() != (round == 1) {
				t.Errorf("round %d, principal %d (%d bytes): %v, replayed %v; want 201 %s, replayed %v",
					round, i, len(principals[i]), r, r.replayed(), want, round == 1)
			}
		}
	}
	for i := range principals {
		if n := calls[i].Load(); n != 1 {
			t.Errorf("principal %d (%d bytes): handler ran %d times, want 1", i, len(principals[i]), n)
		}
	}
}

func TestHostilePrincipalsSQLite(t *testing.T) {
	checkHostilePrincipals(t, func(t *testing.T) driver.KeyStore { return openStore(t, store.Options{}) })
}

// On PostgreSQL a scoped key that was not valid UTF-8 failed Reserve's
// lock, and one beyond the index's row size failed Save.
func TestHostilePrincipalsPostgres(t *testing.T) {
	checkHostilePrincipals(t, func(t *testing.T) driver.KeyStore {
		return pgstore.Open(t, pgtest.DSN(t), postgres.Options{})
	})
}
