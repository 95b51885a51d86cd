package inflight

import (
	"context"
	"strconv"
)

// Observer is told what a limiter does: what metrics adapters count
// (porch/metrics/prom, porch/metrics/otel). A nil Options.Observer
// observes nothing. InflightEvent is called on the goroutines of the
// requests it concerns, concurrently: it must be safe for concurrent use
// and must not block.
type Observer interface {
	// InflightEvent is called once for every request the limiter
	// decided (Admitted, Limited, Unavailable) and once for every slot
	// given back (Released); limiter is its Options.Name. Admitted less
	// Released is the limiter's requests in flight in this process.
	InflightEvent(ctx context.Context, limiter string, e Event)
}

// Event is what a limiter did.
type Event uint8

// The events of a limiter.
const (
	// Admitted: a slot was taken; the handler runs.
	Admitted Event = iota + 1
	// Limited: every slot of the key was in use; refused with 429.
	Limited
	// Unavailable: no slot could be taken (a saturated pool, a failed
	// store, a request that ended first), answered 503; or the KeyFunc
	// failed, answered 500.
	Unavailable
	// Released: a slot was given back.
	Released
)

// String is the event's label: "admitted", "limited", "unavailable" or
// "released".
func (e Event) String() string {
	switch e {
	case Admitted:
		return "admitted"
	case Limited:
		return "limited"
	case Unavailable:
		return "unavailable"
	case Released:
		return "released"
	}
	return "inflight.Event(" + strconv.Itoa(int(e)) + ")"
}

func (l *Limiter) observe(ctx context.Context, e Event) {
	if l.opt.Observer != nil {
		l.opt.Observer.InflightEvent(ctx, l.opt.Name, e)
	}
}

// observeAdmitted observes Admitted for a slot just taken. An Observer
// that panics (the application's bug) gives the slot back on its way up:
// nothing else holds its release yet, and a shared store's slot would be
// renewed until Close.
func (l *Limiter) observeAdmitted(ctx context.Context, release func()) {
	if l.opt.Observer == nil {
		return
	}
	defer func() {
		if v := recover(); v != nil {
			release()
			panic(v)
		}
	}()
	l.opt.Observer.InflightEvent(ctx, l.opt.Name, Admitted)
}
