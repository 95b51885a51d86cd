package rate

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"time"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/clock"
	"github.com/writeonce/porch-go/porch/internal/actor"
	"github.com/writeonce/porch-go/porch/internal/algorithm"
	"github.com/writeonce/porch-go/porch/internal/errlog"
	"github.com/writeonce/porch-go/porch/internal/problemtype"
	"github.com/writeonce/porch-go/porch/rate/internal/count"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// New returns a limiter of limit requests per window, counted by pool's
// actors and persisted in st. A window is rounded up to the millisecond,
// the stores' resolution: one with a remainder would otherwise be stored
// shorter than it counts, and close early after a restart.
//
// With a store that is its counters' only writer (SQLite) each actor keeps
// its keys' counts in memory and writes them through; New loads the counters
// of still-open windows, so a restart resumes them. With a shared store
// (PostgreSQL, Redis) every hit is one atomic step on the store: a
// statement, or a script.
//
// Limiters on one store are told apart by Options.Name, and New refuses
// (store.ErrPolicyConflict) a second limiter of one Name with another limit
// or window while the first counts: they would write the same rows, each by
// its own rule. On a shared store that holds across instances: while any
// running instance counts a Name under one policy, an instance with another
// is refused; once they have all stopped, the first to start records its
// policy (a deploy that changes it). Close frees the Name. A policy changed
// between runs applies to windows still open: their counts are kept, the
// new limit applies to them at once, and each closes at its old end or one
// new window from now, whichever is sooner.
//
// New panics, with a "rate: " message, on a programming error: a nil pool
// or store, a store of a program's own that keeps no counters a limiter
// can use, a limit outside 1 to MaxLimit, a window under
// a millisecond or over MaxWindow, an Options.Name that is not a valid name
// (see Options.Name), an Options.ProblemBase that is not a URI, an
// Options.Algorithm that is none of the constants, an Options.Burst that
// is negative, over MaxLimit or one the algorithm refuses (see
// Options.Burst), an Options.Lease that is negative, over MaxLimit or set
// with an algorithm that counts every hit in the store (GCRA), or an
// option the store would ignore: Options.Lease or Options.RefusalCacheFor
// with a store that is its counters' only writer (SQLite, memory),
// Options.WriteAhead with a shared store (PostgreSQL, Redis). It checks
// all of these before any I/O. It returns an error only for what the
// store answers: the policy refused (store.ErrPolicyConflict), or the
// store failing to record the policy or to load the open windows.
func New(pool *porch.Pool, st store.Counters, limit int, window time.Duration, opt Options) (*Limiter, error) {
	l := newLimiter(pool, st, limit, window, opt)
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

// newLimiter is New's half that does no I/O: it checks the arguments,
// panicking on a programming error, and builds the limiter.
func newLimiter(pool *porch.Pool, st driver.Counters, limit int, window time.Duration, opt Options) *Limiter {
	if pool == nil {
		panic("rate: New expects a non-nil pool")
	}
	if isNil(st) {
		panic("rate: New expects a non-nil store")
	}
	if limit < 1 {
		panic(fmt.Sprintf("rate: New expects limit >= 1, got %d", limit))
	}
	// int64: MaxLimit does not fit a 32-bit int, where no limit passes it.
	if int64(limit) > MaxLimit {
		panic(fmt.Sprintf("rate: New expects limit <= rate.MaxLimit (%d), got %d", int64(MaxLimit), limit))
	}
	if window < time.Millisecond {
		panic(fmt.Sprintf("rate: New expects window >= 1ms, got %s", window))
	}
	if window > MaxWindow {
		panic(fmt.Sprintf("rate: New expects window <= rate.MaxWindow (%s), got %s", MaxWindow, window))
	}
	// The stores keep windows and starts to the millisecond: a window
	// with a remainder was stored rounded down, and a restart closed it
	// that much early (a free allowance). Rounded up, it is held a little
	// longer instead: the safe side. MaxWindow is whole milliseconds, so
	// this cannot pass it.
	window = algorithm.WholeMS(window)
	if opt.Name == "" {
		opt.Name = "default"
	}
	if !validName(opt.Name) {
		panic(fmt.Sprintf(`rate: New expects an Options.Name of printable ASCII without '"', '\' or ':', got %q`, opt.Name))
	}
	if !problemtype.Valid(opt.ProblemBase) {
		panic(fmt.Sprintf("rate: New expects an Options.ProblemBase that is a URI, got %q", opt.ProblemBase))
	}
	alg, ok := algorithm.At(int(opt.Algorithm))
	if !ok {
		panic(fmt.Sprintf("rate: New expects Options.Algorithm %s, got %s", algorithm.Names(), opt.Algorithm))
	}
	if opt.Burst < 0 || int64(opt.Burst) > MaxLimit {
		panic(fmt.Sprintf("rate: New expects Options.Burst from 0 to rate.MaxLimit (%d), got %d", int64(MaxLimit), opt.Burst))
	}
	r, err := alg.Rule(int64(limit), window, int64(opt.Burst))
	if err != nil {
		panic(fmt.Sprintf("rate: New expects a limit, window and Options.Burst that %s counts with: %v", opt.Algorithm, err))
	}
	if opt.Lease < 0 || int64(opt.Lease) > MaxLimit {
		panic(fmt.Sprintf("rate: New expects Options.Lease from 0 to rate.MaxLimit (%d), got %d", int64(MaxLimit), opt.Lease))
	}
	if opt.Lease != 0 && !alg.Leases() {
		panic(fmt.Sprintf("rate: New expects Options.Lease with %s, not %s", algorithm.NamesIf(algorithm.Algorithm.Leases), opt.Algorithm))
	}
	_, exclusive := st.(driver.ExclusiveCounters)
	if _, shared := st.(driver.SharedCounters); !exclusive && !shared {
		panic(fmt.Sprintf("rate: New expects a store with counters (driver.ExclusiveCounters or driver.SharedCounters), got %T", st))
	}
	checkStoreOptions(opt, st, exclusive)
	ahead := int64(opt.WriteAhead)
	switch {
	case ahead == 0:
		ahead = defaultWriteAhead
	case ahead < 0:
		ahead = 0
	}
	l := &Limiter{
		pool: actor.Of(pool), store: st, limit: int64(limit), window: window, ahead: ahead, opt: opt,
		rule:   r,
		policy: fmt.Sprintf(`%q;q=%d;w=%d`, opt.Name, limit, problemtype.RetryAfter(window)),
		prefix: "rate:" + opt.Name + ":",
	}
	if opt.Logger != nil {
		l.errs = errlog.New(clock.System{}, 0, opt.Logger)
	}
	l.most = l.rule.Most()
	l.limitValue = []string{strconv.FormatInt(l.most, 10)}
	l.policyValue = []string{l.policy}
	l.rateLimitPrefix = `"` + opt.Name + `";r=`
	l.calls.New = l.newCall
	cf := count.Config{Pool: l.pool, Rule: l.rule, Most: l.most, Lost: lostTakeBacks(l.errs, opt.Name)}
	if exclusive {
		l.counter = count.NewLocal(cf, st.(driver.ExclusiveCounters), l.prefix, ahead)
	} else {
		refusalFor := opt.RefusalCacheFor
		if refusalFor == 0 {
			refusalFor = defaultRefusalCacheFor
		}
		l.counter = count.NewShared(cf, st.(driver.SharedCounters), int64(opt.Lease), refusalFor)
	}
	return l
}

// checkStoreOptions panics on an option that st's kind of store would
// ignore: Lease and RefusalCacheFor save round trips to a shared store,
// WriteAhead saves writes of counts held in memory. Set on the other kind
// they would change nothing, and a limiter that silently runs without what
// its caller asked for is a configuration bug found in production. Zero is
// "not set" and fits every store; a negative value asks for a behaviour
// (no cache, exact writes) that only its own kind has, so it is refused
// on the other too.
func checkStoreOptions(opt Options, st driver.Counters, exclusive bool) {
	if exclusive {
		if opt.Lease != 0 {
			panic(fmt.Sprintf("rate: New expects Options.Lease only with a shared store (PostgreSQL, Redis), got Lease %d with %T, its counters' only writer: it counts in memory already, and writes ahead instead (Options.WriteAhead)", opt.Lease, st))
		}
		if opt.RefusalCacheFor != 0 {
			panic(fmt.Sprintf("rate: New expects Options.RefusalCacheFor only with a shared store (PostgreSQL, Redis), got %s with %T, its counters' only writer: it decides every hit in memory, with no round trip for a cache to save", opt.RefusalCacheFor, st))
		}
		return
	}
	if opt.WriteAhead != 0 {
		panic(fmt.Sprintf("rate: New expects Options.WriteAhead only with a store that is its counters' only writer (SQLite, memory), got WriteAhead %d with %T, a shared store: it decides every hit itself, and counts a busy key ahead with Options.Lease instead", opt.WriteAhead, st))
	}
}

// validName reports whether name can go into a counter key and a header
// as it is (see Options.Name).
func validName(name string) bool {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < ' ' || c > '~' || c == '"' || c == '\\' || c == ':' {
			return false
		}
	}
	return true
}

// isNil reports whether st is nil, or a nil pointer in an interface (what
// st, _ := sqlite.Open(...) leaves behind when the open failed).
func isNil(st driver.Counters) bool {
	if st == nil {
		return true
	}
	v := reflect.ValueOf(st)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// open is New's half that does I/O: it claims the limiter's policy in the
// store and loads what the store holds of it.
func (l *Limiter) open() error {
	ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
	defer cancel()
	release, err := l.store.ClaimPolicy(ctx, l.storePolicy())
	if err != nil {
		return fmt.Errorf("rate: %w", err)
	}
	l.release = release
	if err := l.counter.Open(context.Background()); err != nil {
		release()
		return err
	}
	return nil
}

// storePolicy is the policy the store records for this limiter's Name.
func (l *Limiter) storePolicy() driver.Policy {
	return driver.Policy{Name: l.opt.Name, Limit: l.limit, Window: l.window, Algorithm: l.rule.Algorithm(), Burst: l.rule.Burst()}
}

// claimTimeout bounds New's claim of its policy in a shared store.
const claimTimeout = 30 * time.Second
