package idem

import (
	"github.com/writeonce/porch-go/porch/store"
)

// flight is one decision about a key in this process: from the moment a
// leader is chosen until the key's outcome is known (a replay, a conflict, a
// freshly stored response) or the leader gives the key up. Duplicates that
// arrive meanwhile hold the flight and wait on done; they are not registered
// anywhere, so one that leaves (its context ended) needs no cleanup.
//
// The fields below done are written once, on the actor, before done is
// closed, and read only after it is closed.
type flight struct {
	leader *caller // compared by identity
	done   chan struct{}

	kind outcome        // outcomeReplay, outcomeReleased or outcomeFailed
	res  store.Response // outcomeReplay
	err  error          // outcomeFailed
}

// caller identifies one request to the actor, so that a leader that left
// before learning it led can give the key back, and only that leader.
//
// It must not be zero-size: Go may give every zero-size allocation the same
// address, and then every caller would compare equal to the leader, so a
// duplicate that left could end the real leader's flight.
type caller struct {
	_ byte // gives each caller an address of its own
}

type outcome int

const (
	outcomeLead     outcome = iota + 1 // no flight: this caller decides for the key
	outcomeWait                        // a flight is under way: wait on it
	outcomeReplay                      // a response is stored (its digest decides replay or 422)
	outcomeReleased                    // the leader gave up; nothing is known
	outcomeFailed                      // the store failed; the outcome is unknown
)

// shard is one actor's in-flight keys. Only that actor touches it.
type shard struct {
	flights map[string]*flight
}

// begin runs on key's actor: the first caller for a key leads its flight,
// every later one waits on it. The actor does no I/O.
func (sh *shard) begin(key string, c *caller) (outcome, *flight) {
	if f, ok := sh.flights[key]; ok {
		return outcomeWait, f
	}
	f := &flight{leader: c, done: make(chan struct{})}
	sh.flights[key] = f
	return outcomeLead, f
}

// end runs on key's actor when c's flight has an outcome: it publishes the
// outcome to the waiters and lets the key go, so the next request reads the
// stored row or leads afresh. A caller that no longer leads (it left and
// its flight was already ended) changes nothing.
func (sh *shard) end(key string, c *caller, kind outcome, res store.Response, err error) {
	f, ok := sh.flights[key]
	if !ok || f.leader != c {
		return
	}
	delete(sh.flights, key)
	f.kind, f.res, f.err = kind, res, err
	close(f.done)
}
