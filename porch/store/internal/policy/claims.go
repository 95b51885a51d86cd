// Package policy keeps the rate policies one process's limiters claim in a
// store, for every driver: two limiters of one name that count under
// different policies would write the same counter rows, each by its own
// rule.
package policy

import (
	"fmt"
	"sync"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
)

// Claims are the policies claimed in one store by this process. The zero
// value is ready to use, and it is safe for concurrent use.
type Claims struct {
	mu   sync.Mutex // protects held
	held map[string]*claim
}

type claim struct {
	p     driver.Policy
	users int
	// release ends what the first claim took beyond this process (the
	// PostgreSQL lock); nil when it took nothing.
	release func()
}

// Claim records p for this process, failing with store.ErrPolicyConflict
// while a limiter of p.Name counts under another policy here. first reports
// whether no limiter held p.Name before, in which case the caller claims it
// beyond the process too and hands that claim's release to SetRelease.
func (c *Claims) Claim(p driver.Policy) (first bool, release func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held == nil {
		c.held = make(map[string]*claim)
	}
	h := c.held[p.Name]
	if h == nil {
		h = &claim{p: p}
		c.held[p.Name] = h
	} else if !h.p.Equal(p) {
		return false, nil, fmt.Errorf("%w under another policy: %s is already counted in this process as %s; give one of them another Name",
			store.ErrPolicyConflict, p, h.p)
	}
	h.users++
	var once sync.Once
	return h.users == 1, func() { once.Do(func() { c.drop(p.Name) }) }, nil
}

// ClaimAlone is Claim for a store whose limiters each count in their own
// memory and write through (SQLite, the memory store): a second limiter
// of p.Name is refused even under the same policy, since the two would
// count apart and overwrite each other's counters. where names the store
// in the error ("on SQLite").
func (c *Claims) ClaimAlone(p driver.Policy, where string) (release func(), err error) {
	first, release, err := c.Claim(p)
	if err != nil {
		return nil, err
	}
	if !first {
		release()
		return nil, fmt.Errorf("%w: two limiters named %q in one store, under the same policy, and %s each would count in its own memory and overwrite the other's counters; give each limiter its own Name",
			store.ErrPolicyConflict, p.Name, where)
	}
	return release, nil
}

// SetRelease attaches the release of the first claim's lock beyond the
// process to name's claim.
func (c *Claims) SetRelease(name string, release func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h := c.held[name]; h != nil {
		h.release = release
	}
}

// drop ends one limiter's claim; the last one out releases the name.
func (c *Claims) drop(name string) {
	c.mu.Lock()
	h := c.held[name]
	if h == nil {
		c.mu.Unlock()
		return
	}
	if h.users--; h.users > 0 {
		c.mu.Unlock()
		return
	}
	delete(c.held, name)
	c.mu.Unlock()
	if h.release != nil {
		h.release()
	}
}
