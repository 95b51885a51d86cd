package porchtest

import (
	"context"
	"sync"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/idem"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
)

// Observer counts what it is told, for tests of code that takes a
// porch.PoolObserver, a rate.Observer, an idem.Observer or a store.Observer. The zero value is ready to use; it is
// safe for concurrent use.
type Observer struct {
	mu       sync.Mutex // protects the fields below
	rate     map[rateKey]int
	idem     map[idem.Outcome]int
	rejected int
	batches  []store.Batch
}

type rateKey struct {
	limiter string
	outcome rate.Outcome
}

var (
	_ porch.PoolObserver = (*Observer)(nil)
	_ rate.Observer      = (*Observer)(nil)
	_ idem.Observer      = (*Observer)(nil)
	_ store.Observer     = (*Observer)(nil)
)

// RateDecision counts a limiter's decision.
func (o *Observer) RateDecision(_ context.Context, limiter string, out rate.Outcome, _ rate.Verdict) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.rate == nil {
		o.rate = make(map[rateKey]int)
	}
	o.rate[rateKey{limiter, out}]++
}

// IdemOutcome counts an idempotency outcome.
func (o *Observer) IdemOutcome(_ context.Context, out idem.Outcome) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.idem == nil {
		o.idem = make(map[idem.Outcome]int)
	}
	o.idem[out]++
}

// PoolRejected counts a job the pool refused.
func (o *Observer) PoolRejected() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rejected++
}

// CommitBatch records a committer's batch.
func (o *Observer) CommitBatch(b store.Batch) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.batches = append(o.batches, b)
}

// Rate reports how many of limiter's decisions were out.
func (o *Observer) Rate(limiter string, out rate.Outcome) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.rate[rateKey{limiter, out}]
}

// Idem reports how many idempotency outcomes were out.
func (o *Observer) Idem(out idem.Outcome) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.idem[out]
}

// Rejected reports how many jobs the pool refused.
func (o *Observer) Rejected() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.rejected
}

// Batches returns the batches recorded so far, oldest first.
func (o *Observer) Batches() []store.Batch {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]store.Batch(nil), o.batches...)
}
