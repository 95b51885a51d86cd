package store

import "time"

// Observer is told of every transaction a store's committer ends: what a
// metrics adapter counts (porch/metrics/prom is one). Options.Observer
// takes it; nil observes nothing. CommitBatch is called on the committer's
// goroutine after each batch and before its writers are answered, so it
// must be cheap and must not block; it is never called concurrently for
// one store. A panic in it is recovered (and the first one logged), so a
// broken adapter costs metrics, never the writes.
type Observer interface {
	CommitBatch(b Batch)
}

// Batch is one transaction of the committer, as an Observer is told it.
type Batch struct {
	// Writes is how many queued writes the transaction carried, before
	// collapsing (a health probe is one).
	Writes int
	// Took is how long the driver took to make it durable or fail, on the
	// store's monotonic clock: CommitDelay included.
	Took time.Duration
	// Err is nil when the batch committed, else the error every write in it
	// got.
	Err error
}
