package store

import "github.com/writeonce/porch-go/porch/store/driver"

// ErrUnhealthy is returned by a store's Health, wrapping the reason, while
// the store cannot commit: its last commit failed, or its probe's commit
// did not finish within a second. Health answers from the last commit
// when it finished within the last second, so polling it under load costs
// no write; an idle store commits one shared probe.
var ErrUnhealthy = driver.ErrUnhealthy
