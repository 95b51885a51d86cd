package idem

import (
	"sync/atomic"
	"weak"

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
