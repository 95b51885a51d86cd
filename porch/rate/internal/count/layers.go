package count

import (
	"time"

	"github.com/writeonce/porch-go/porch/store/driver"
)

// NewShared is the Counter on a shared store: the store's own, behind
// leases of up to lease hits (none if lease is 0), behind the refusal
// cache whose refusals live at most refusalFor (none if it is not
// positive). The cache is in front, so that a refused key is answered
// before a lease or the store is asked; the lease's hits go back to the
// store through the store's own counting, under the cache, which hears of
// every Reset and TakeBack first.
func NewShared(cf Config, st driver.SharedCounters, lease int64, refusalFor time.Duration) Counter {
	var c onStore = newShared(cf, st)
	if lease > 0 {
		c = newLeases(cf, st, c, lease)
	}
	if refusalFor > 0 {
		c = newRefusals(cf, c, refusalFor)
	}
	return c
}
