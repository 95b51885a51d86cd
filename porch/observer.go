package porch

// PoolObserver is told when a Pool refuses a job for saturation: what a
// metrics adapter counts (porch/metrics/prom is one, for Prometheus). The
// middlewares define their own observers for their decisions
// (rate.Observer, idem.Observer), so one type may implement all of them;
// porch declares nothing of its middlewares.
//
// A nil PoolOptions.Observer observes nothing, for one nil check per
// refusal. PoolRejected is called on the goroutines of the requests it
// concerns, concurrently: it must be safe for concurrent use and must not
// block.
type PoolObserver interface {
	// PoolRejected is called when the pool refuses a request's job because
	// the key's mailbox is full (ErrSaturated): a request answered 503.
	PoolRejected()
}
