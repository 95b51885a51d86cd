package idem

import (
	"context"
	"errors"
	"net/http"
	"time"
	"weak"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/internal/actor"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
)

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

// finish ends f with res: it publishes res to f's waiters and lets the key
// go, so that the next request reads the stored row or leads afresh. It
// runs on the caller's goroutine, which needs no reply from the actor: the
// waiters are parked on f.done, not on the actor, and the key's entry in
// the actor's map is dropped by the actor itself when it next looks (see
// shard.join). A flight that was never the key's (its caller left before
// learning whether it leads) ends all the same, with nobody waiting on it.
// Only the first finish of a flight counts. (A message to the actor
// instead would cost every keyed request one more goroutine hand-off, the
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
