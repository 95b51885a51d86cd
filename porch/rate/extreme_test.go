package rate_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/writeonce/porch-go/internal/pgtest/pgstore"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store/postgres"
)

// extremeLimits are the limits at the edges of what New accepts and past
// them. Before MaxLimit, New took 1<<62 and math.MaxInt, and count+n
// wrapped negative: AllowN(1<<62) was allowed three times in a row, and at
// MaxInt AllowN(MaxInt-1) then AllowN(2) were both allowed (on PostgreSQL
// the second failed with "bigint out of range" while reporting Allowed).
var extremeLimits = []int{1, 2, rate.MaxLimit - 1, rate.MaxLimit, rate.MaxLimit + 1, 1 << 62, math.MaxInt}

// weightsNear are the weights at the edges for limit: invalid, tiny, about
// the limit, and as heavy as an int can say.
func weightsNear(limit int) []int {
	return []int{math.MinInt, -1, 0, 1, 2, limit / 2, limit - 1, limit, limit + 1, rate.MaxLimit, rate.MaxLimit + 1, math.MaxInt}
}

// checkExtremeLimits counts seeded sequences of weights near each extreme
// limit against a fresh limiter from open, one principal per window, and
// checks after every call what must hold whatever the arithmetic: the
// allowed weights of a window never sum past the limit, a weight that fits
// is never refused, Remaining is exactly what is left and never negative,
// and a failure comes with no verdict.
func checkExtremeLimits(t *testing.T, open func(t *testing.T, name string, limit int) *rate.Limiter) {
	ctx := context.Background()
	for i, limit := range extremeLimits {
		t.Run(strconv.Itoa(limit), func(t *testing.T) {
			lim, panicked := tryNew(func() *rate.Limiter { return open(t, fmt.Sprintf("x%d", i), limit) })
			if limit > rate.MaxLimit {
				if strings.Contains(panicked, "rate.MaxLimit") {
					return
				}
				// Carry on: what it then serves is the reason for the bound.
				t.Errorf("New accepted limit %d above MaxLimit (%d)", limit, rate.MaxLimit)
			} else if panicked != "" {
				t.Fatalf("New(limit %d) panicked: %s", limit, panicked)
			}
			weights := weightsNear(limit)
			rnd := rand.New(rand.NewPCG(15, uint64(i)))
			for p := range 4 {
				principal := "p" + strconv.Itoa(p)
				var seq []int
				if p == 0 {
					// The sequences: a near-full window, then more.
					seq = []int{limit - 1, 2, 1, limit}
				}
				for range 16 {
					seq = append(seq, weights[rnd.IntN(len(weights))])
				}
				var sum int64 // allowed in principal's window
				for j, w := range seq {
					v, err := lim.AllowN(ctx, principal, w)
					where := fmt.Sprintf("%s call %d, AllowN(%d) after %d allowed", principal, j+1, w, sum)
					switch {
					case w < 1:
						if !errors.Is(err, rate.ErrWeight) || v != (rate.Verdict{}) {
							t.Fatalf("%s: got %+v, %v; want no verdict and ErrWeight", where, v, err)
						}
						continue
					case int64(w) > int64(limit):
						if !errors.Is(err, rate.ErrOverLimit) || v != (rate.Verdict{}) {
							t.Fatalf("%s: got %+v, %v; want no verdict and ErrOverLimit", where, v, err)
						}
						continue
					case err != nil:
						t.Fatalf("%s: got %+v, %v; want a verdict", where, v, err)
					}
					// limit-sum, not sum+w: this side must not wrap either.
					fits := int64(w) <= int64(limit)-sum
					if v.Allowed != fits {
						t.Fatalf("%s: got allowed %v, want %v", where, v.Allowed, fits)
					}
					if fits {
						sum += int64(w)
					}
					if v.Limit != int64(limit) || v.Remaining != int64(limit)-sum || v.Remaining < 0 {
						t.Fatalf("%s: got limit %d remaining %d, want %d and %d", where, v.Limit, v.Remaining, limit, int64(limit)-sum)
					}
				}
			}
		})
	}
}

// tryNew runs f, which builds a limiter, and returns New's panic if any.
func tryNew(f func() *rate.Limiter) (lim *rate.Limiter, panicked string) {
	defer func() {
		if v := recover(); v != nil {
			panicked = fmt.Sprint(v)
		}
	}()
	return f(), ""
}

func TestExtremeLimits(t *testing.T) {
	checkExtremeLimits(t, func(t *testing.T, name string, limit int) *rate.Limiter {
		return newRig(t, limit, time.Hour, rigOptions{rate: rate.Options{Name: name}}).lim
	})
}

func TestExtremeLimitsPostgres(t *testing.T) {
	st, pool := openPostgres(t, pgtest.DSN(t))
	checkExtremeLimits(t, func(t *testing.T, name string, limit int) *rate.Limiter {
		lim, err := rate.New(pool, st, limit, time.Hour, rate.Options{Name: name})
		if err != nil {
			t.Fatalf("new limiter: %v", err)
		}
		t.Cleanup(func() { lim.Close(context.Background()) })
		return lim
	})
}

// openPostgres opens a store on dsn and a pool, closed at cleanup in App's
// order.
func openPostgres(t *testing.T, dsn string) (*postgres.Store, *porch.Pool) {
	t.Helper()
	st := pgstore.Open(t, dsn, postgres.Options{})
	pool := porch.NewPool(porch.PoolOptions{})
	t.Cleanup(func() { pool.Close(context.Background()) })
	return st, pool
}

// A write that fails answers the error with no verdict: a caller that
// looks at Allowed before the error must not find the request allowed.
// Both stores used to answer a failed write with the verdict the hit would
// have had, Allowed included.
func TestFailedWriteAnswersNoVerdict(t *testing.T) {
	rg := newRig(t, 5, time.Minute, rigOptions{})
	if _, err := rg.st.DB().Exec(`CREATE TRIGGER boom BEFORE INSERT ON porch_rate_journal
		BEGIN SELECT RAISE(ABORT, 'boom'); END`); err != nil {
		t.Fatal(err)
	}
	v, err := rg.lim.Allow(context.Background(), "alice")
	if err == nil || v != (rate.Verdict{}) {
		t.Fatalf("got %+v, %v; want no verdict and the write's error", v, err)
	}
}

func TestFailedWriteAnswersNoVerdictPostgres(t *testing.T) {
	in := newInstance(t, pgtest.DSN(t), 5, time.Minute)
	if _, err := in.st.Pool().Exec(context.Background(), `ALTER TABLE porch_rate_counters ADD CONSTRAINT boom CHECK (count < 0)`); err != nil {
		t.Fatal(err)
	}
	v, err := in.lim.Allow(context.Background(), "alice")
	if err == nil || v != (rate.Verdict{}) {
		t.Fatalf("got %+v, %v; want no verdict and the write's error", v, err)
	}
}
