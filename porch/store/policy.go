package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrPolicyConflict is returned by ClaimPolicy when a limiter of the same
// name counts in the store under another limit or window: in this process,
// or, on PostgreSQL, in another instance that is still running. Two such
// limiters would write the same counter rows, each by its own rule, and
// neither count would be exact.
var ErrPolicyConflict = errors.New("store: a limiter of this name counts here under another policy")

// Policy is what a rate limiter counts under: Limit requests per Window, in
// the counter rows of Name.
type Policy struct {
	Name   string
	Limit  int64
	Window time.Duration
}

func (p Policy) String() string { return fmt.Sprintf("%q: %d per %s", p.Name, p.Limit, p.Window) }

// policyClaims are the policies claimed in one store by this process. The
// zero value is ready to use.
type policyClaims struct {
	mu   sync.Mutex // protects held
	held map[string]*policyClaim
}

type policyClaim struct {
	p     Policy
	users int
	// release ends what the first claim took beyond this process (the
	// PostgreSQL lock); nil when it took nothing.
	release func()
}

// claim records p for this process. first reports whether no limiter held
// p.Name before, in which case the caller claims it beyond the process
// too and hands that claim's release to setRelease.
func (c *policyClaims) claim(p Policy) (first bool, release func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held == nil {
		c.held = make(map[string]*policyClaim)
	}
	h := c.held[p.Name]
	if h == nil {
		h = &policyClaim{p: p}
		c.held[p.Name] = h
	} else if h.p != p {
		return false, nil, fmt.Errorf("%w: %s is already counted in this process as %s; give one of them another Name",
			ErrPolicyConflict, p, h.p)
	}
	h.users++
	var once sync.Once
	return h.users == 1, func() { once.Do(func() { c.drop(p.Name) }) }, nil
}

// setRelease attaches the release of the first claim's lock beyond the
// process to name's claim.
func (c *policyClaims) setRelease(name string, release func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h := c.held[name]; h != nil {
		h.release = release
	}
}

// drop ends one limiter's claim; the last one out releases the name.
func (c *policyClaims) drop(name string) {
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

// ClaimPolicy records that a limiter counts under p until release is called
// (Limiter.Close does), and fails with ErrPolicyConflict while a limiter of
// the same name and another policy counts in this store. One process writes
// a SQLite file, so the check is within the process; a policy changed across
// a restart is a deploy, and the limiter decides what open windows do.
func (s *SQLite) ClaimPolicy(_ context.Context, p Policy) (release func(), err error) {
	_, release, err = s.claims.claim(p)
	return release, err
}
