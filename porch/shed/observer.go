package shed

import (
	"context"
	"strconv"
)

// Observer is told what the Shedders whose Options.Observer it is do with
// each request they count: what a metrics adapter counts
// (porch/metrics/prom and porch/metrics/otel implement it), refusals by
// class and, from admissions less releases, the requests in flight.
//
// A nil Options.Observer observes nothing, for one nil check per event.
// ShedEvent is called on the goroutines of the requests it concerns,
// concurrently: it must be safe for concurrent use, must not block, and
// should not allocate.
type Observer interface {
	// ShedEvent is called once when a Shedder admits or refuses a
	// request, and once more when it releases one it admitted; critical
	// is the class it was admitted or refused in. An exempt request, and
	// one passed on by a mount further in, is told nothing.
	ShedEvent(ctx context.Context, e Event, critical bool)
}

// Event is what a Shedder did with a request.
type Event uint8

// The events of a request: Admitted then Released, or Refused.
const (
	// Admitted: the request took a slot and its handler runs.
	Admitted Event = iota + 1
	// Refused: the request was answered 503; it took no slot.
	Refused
	// Released: an admitted request's handler returned (it answered,
	// panicked or gave up) and its slot is free again.
	Released
)

// String is the event's label: "admitted", "refused" or "released".
func (e Event) String() string {
	switch e {
	case Admitted:
		return "admitted"
	case Refused:
		return "refused"
	case Released:
		return "released"
	}
	return "shed.Event(" + strconv.Itoa(int(e)) + ")"
}
