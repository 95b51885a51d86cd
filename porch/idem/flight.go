package idem

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
	"weak"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/internal/actor"
	"github.com/writeonce/porch-go/porch/internal/problemtype"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// flight is one decision about a key in this process, shaped like
// golang.org/x/sync/singleflight's call: from the moment a leader is chosen
// until the key's outcome is known (a replay, a conflict, a freshly stored
// response) or the leader gives the key up. Duplicates that arrive meanwhile
// hold the flight and wait on done; they are not registered anywhere, so one
// that leaves (its context ended) needs no cleanup.
//
// A caller brings a flight of its own to the key's actor, which makes it the
// key's flight when there is none. The flight is thus also the caller's
// identity: a caller that left before learning whether it leads finishes its
// own flight, which ends nothing unless that flight is the key's. (A token
// compared by identity must not be zero-size: Go may give every zero-size
// allocation the same address, and then a duplicate that left would end the
// real leader's flight.)
type flight struct {
	key  string        // the scoped key, under which the actor holds the flight
	done chan struct{} // closed by Keys.finish, once
	res  result        // written before done is closed, read only after
	// owner is the digest of the request running the handler, set once its
	// leader owns the key in the store: a duplicate that runs out of MaxWait
	// compares it with its own, so that a reused key is told 422 rather
	// than to retry. nil while the leader is still reserving the key, or
	// when it never owned it.
	owner atomic.Pointer[[]byte]
	// ended is set by the one finish that ends the flight, before res is
	// written and done closed: the actor no longer hands an ended flight
	// to a caller to wait on.
	ended atomic.Bool
}

func newFlight(key string) *flight {
	return &flight{key: key, done: make(chan struct{})}
}

// result is how a flight ended: what its waiters act on.
type result struct {
	kind     ending
	response driver.Response // endStored
	err      error           // endFailed
}

type ending int

const (
	endStored   ending = iota + 1 // a response is stored (its digest decides replay or 422)
	endReleased                   // the leader gave the key up; nothing is known
	endFailed                     // the store failed; the outcome is unknown
)

// stored ends a flight whose key has response stored: every waiter answers
// from it.
func stored(response driver.Response) result { return result{kind: endStored, response: response} }

// released ends a flight whose leader gave the key up (a 5xx, a panic, it
// left, MaxWait): its waiters decide afresh, and the first one back leads.
func released() result { return result{kind: endReleased} }

// failed ends a flight whose store failed: its waiters fail closed too.
func failed(err error) result { return result{kind: endFailed, err: err} }

// decide runs r's part in key's flight: it leads the flight, or waits on the
// one under way and answers from how it ended. A duplicate whose leader
// gave the key up tries again, and the first one back leads.
func (m *Keys) decide(r *http.Request, key string, digest []byte) (*http.Request, *porch.Response) {
	for {
		f, leads, err := m.begin(r.Context(), key)
		if err != nil {
			m.observe(r, Unavailable)
			return r, m.unavailable(r, err)
		}
		if leads {
			return m.lead(r, f, digest)
		}
		if res := m.wait(r, f, digest); res != nil {
			return r, res
		}
		switch f.res.kind {
		case endStored:
			return r, m.answer(r, f.res.response, digest)
		case endFailed:
			m.observe(r, Unavailable)
			return r, m.unavailable(r, f.res.err)
		}
		// endReleased: the leader gave the key up; decide afresh.
	}
}

// begin asks key's actor for the key's flight: the caller leads a flight of
// its own when none is under way, and waits on the one under way otherwise.
// A caller that leaves before the answer arrives finishes its own flight, so
// a lead it was granted is handed back and no key is left led by a caller
// nobody runs.
func (m *Keys) begin(ctx context.Context, key string) (f *flight, leads bool, err error) {
	mine := newFlight(key)
	reply := actor.NewReply[*flight]()
	if err := m.pool.Send(key, func(i int) { reply.Send(m.shards[i].join(mine), nil) }); err != nil {
		return nil, false, err
	}
	if f, err = reply.Wait(ctx); err != nil {
		m.finish(mine, released())
		return nil, false, err
	}
	return f, f == mine, nil
}

// lead runs on the leader's goroutine: it reserves the key in the store
// (across processes, where the store is shared) and reads what is stored.
// With nothing stored the request owns the key and goes on to the handler,
// and After finishes the flight; otherwise lead finishes it.
func (m *Keys) lead(r *http.Request, f *flight, digest []byte) (*http.Request, *porch.Response) {
	hold, row, err := m.load(r.Context(), f.key)
	if hold != nil {
		// The chain runs no After for a Before that panics: an observer
		// panicking here would leave the key reserved and its flight led
		// by nobody, so every retry would wait for an owner that is gone.
		defer func() {
			if v := recover(); v != nil {
				hold.Release()
				m.finish(f, released())
				panic(v)
			}
		}()
		f.owner.Store(&digest)
		m.observe(r, Executed)
		return m.own(r, f, digest, hold), nil
	}
	m.finish(f, loaded(r.Context(), row, err))
	switch {
	case err == nil:
		return r, m.answer(r, row, digest)
	case errors.Is(err, errWaitedTooLong), errors.Is(err, store.ErrKeyHeld):
		m.observe(r, InFlight)
		return r, m.inFlight()
	}
	m.observe(r, Unavailable)
	return r, m.unavailable(r, err)
}

// load reserves key in the store and reads what is stored under it. It
// returns the reservation only when nothing is stored and nothing failed;
// otherwise the reservation has ended by the time load returns, so the key's
// slot in the store is free before the flight ends.
func (m *Keys) load(ctx context.Context, key string) (driver.Reservation, driver.Response, error) {
	hold, err := m.reserve(ctx, key)
	if err != nil {
		return nil, driver.Response{}, err
	}
	row, ok, err := hold.Load(ctx)
	if err != nil || ok {
		hold.Release()
		return nil, row, err
	}
	return hold, driver.Response{}, nil
}

// errWaitedTooLong reports a reservation that outlasted MaxWait.
var errWaitedTooLong = errors.New("idem: waited longer than MaxWait for the key")

// reserve reserves key in the store. With a shared store it may wait for an
// owner on another instance; MaxWait bounds that wait as it bounds a local
// duplicate's, and so may the store (postgres.Options.Timeout), which then
// fails with store.ErrKeyHeld: either way the request is answered 409, in
// flight.
func (m *Keys) reserve(ctx context.Context, key string) (driver.Reservation, error) {
	if m.opt.MaxWait <= 0 {
		return m.store.Reserve(ctx, key)
	}
	wctx, cancel := context.WithTimeout(ctx, m.opt.MaxWait)
	defer cancel()
	hold, err := m.store.Reserve(wctx, key)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return nil, errWaitedTooLong
	}
	return hold, err
}

// loaded is how a flight ends whose leader did not get to own the key: with
// the row load found, or, when load failed, released if the leader gave up
// waiting (MaxWait, or its context ended: nothing is known, and the waiters
// decide afresh), and failed if the store failed (the waiters fail too).
func loaded(ctx context.Context, row driver.Response, err error) result {
	switch {
	case err == nil:
		return stored(row)
	case errors.Is(err, errWaitedTooLong), errors.Is(err, store.ErrKeyHeld),
		ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return released()
	}
	return failed(err)
}

// wait parks a duplicate until the leader's flight is over. It returns a
// response only when the wait itself ends the request (context, MaxWait).
// A duplicate whose MaxWait runs out while an owner runs a different
// request under its key (method, path or body) is told 422, as it would be
// once that owner's response is stored: the draft puts a reused key before
// a request in flight, and a client retrying a 409 would only be refused
// later, or, if the owner stored nothing, run a request it never meant to
// repeat under that key.
func (m *Keys) wait(r *http.Request, f *flight, digest []byte) *porch.Response {
	var timeout <-chan time.Time
	if m.opt.MaxWait > 0 {
		t := time.NewTimer(m.opt.MaxWait)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-f.done:
		return nil
	case <-timeout:
		if owner := f.owner.Load(); owner != nil && !sameRequest(*owner, digest) {
			m.observe(r, Mismatch)
			return m.reused("a request with a different method, path or body is running under this key", *owner, digest)
		}
		m.observe(r, InFlight)
		return m.inFlight()
	case <-r.Context().Done():
		m.observe(r, Unavailable)
		return m.unavailable(r, r.Context().Err())
	}
}

// inFlight is the draft's answer to a duplicate that waited MaxWait for the
// key's owner: 409, and when to retry.
func (m *Keys) inFlight() *porch.Response {
	res := m.problem(problemInFlight, http.StatusConflict, "Request in flight",
		"a request with this "+m.keyHeader+" is still being processed; retry later")
	res.SetHeader("Retry-After", strconv.Itoa(problemtype.RetryAfter(m.opt.MaxWait)))
	return res
}

// answer is what a request gets once its key has a stored response: a
// replay when it is the same request, and 422 when the key was reused for a
// different one. Nothing is run and nothing is overwritten.
func (m *Keys) answer(r *http.Request, row driver.Response, digest []byte) *porch.Response {
	if !sameRequest(row.Digest, digest) {
		m.observe(r, Mismatch)
		return m.reused("this key was used for a request with a different method, path or body", row.Digest, digest)
	}
	m.observe(r, Replayed)
	return replay(row, m.keep, m.replayedHeader)
}

// finish ends f with res: it publishes res to f's waiters and lets the key
// go, so that the next request reads the stored row or leads afresh. It
// runs on the caller's goroutine, which needs no reply from the actor: the
// waiters are parked on f.done, not on the actor, and the key's entry in
// the actor's map is dropped by the actor itself when it next looks (see
// shard.join). A flight that was never the key's (its caller left before
// learning whether it leads) ends all the same, with nobody waiting on it.
// Only the first finish of a flight counts. (A message to the actor
// instead cost every keyed request one more goroutine hand-off, the
// actor's wake-up, and its closure's allocations.)
func (m *Keys) finish(f *flight, res result) {
	if !f.ended.CompareAndSwap(false, true) {
		return
	}
	f.res = res
	close(f.done)
	sh := m.shards[m.pool.Shard(f.key)]
	e := endedFlight{key: f.key, f: weak.Make(f)}
	select {
	case sh.ended <- e:
		return
	default:
	}
	// Full: the actor has not joined for a while. Send it the drop, waiting
	// for mailbox room, so that the map does not keep the key.
	if err := m.pool.SendWait(f.key, func(int) { sh.drop(e) }); err != nil {
		m.errs.Error(context.Background(), "idem: report to actor failed", "err", err)
	}
}

// shardEnded is how many ended flights a shard holds for its actor. Every
// flight in the map was entered by a join on its shard, and every join
// drains the list first, so it holds about the flights that ended since
// the shard's last join: no more than were in flight. The list and the
// map hold a flight weakly, so an idle shard keeps only those keys: the
// flight itself, and the response in its result, go once its leader and
// waiters are done with it.
const shardEnded = 256

// shard is one actor's in-flight keys. Only that actor touches flights;
// ended is where finish leaves the flights that ended, for the actor to
// drop without being woken for it.
//
// Both hold a flight weakly: a flight under way is held by its leader's
// goroutine until its finish, and by its waiters until they have read its
// result, so a flight the map can no longer reach has ended, and an idle
// shard does not keep stored responses alive until its next join.
type shard struct {
	flights map[string]weak.Pointer[flight]
	ended   chan endedFlight
}

// endedFlight is a flight left for its actor to drop: its key, since the
// flight may be gone by then, and the flight, to drop the key only if it
// is still that flight's.
type endedFlight struct {
	key string
	f   weak.Pointer[flight]
}

func newShard() *shard {
	return &shard{flights: make(map[string]weak.Pointer[flight]), ended: make(chan endedFlight, shardEnded)}
}

// drain runs on the actor: it drops every flight that ended since it last
// ran.
func (sh *shard) drain() {
	for {
		select {
		case e := <-sh.ended:
			sh.drop(e)
		default:
			return
		}
	}
}

// drop runs on the actor: it lets e's key go, unless the key has a newer
// flight already.
func (sh *shard) drop(e endedFlight) {
	if sh.flights[e.key] == e.f {
		delete(sh.flights, e.key)
	}
}

// live returns key's flight under way, or nil: a flight that ended counts
// as none, whether or not drain has dropped it yet.
func (sh *shard) live(key string) *flight {
	if f := sh.flights[key].Value(); f != nil && !f.ended.Load() {
		return f
	}
	return nil
}

// flying runs on key's actor: whether a flight of key is under way.
func (sh *shard) flying(key string) bool {
	return sh.live(key) != nil
}

// join runs on the key's actor: mine becomes the key's flight when it has
// none under way, and its caller leads; otherwise the flight under way is
// returned, to wait on. A flight that ended counts as none, whether or not
// drain has dropped it yet. The actor does no I/O.
func (sh *shard) join(mine *flight) *flight {
	sh.drain()
	if f := sh.live(mine.key); f != nil {
		return f
	}
	if mine.ended.Load() {
		// Its caller left and finished it already: entered now, it
		// would never be dropped (its drop may have run).
		delete(sh.flights, mine.key)
		return mine
	}
	// Entered before it ends: its finish leaves it on the ended list after
	// this, and the next drain drops it.
	sh.flights[mine.key] = weak.Make(mine)
	return mine
}
