package redis

import (
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// settle fills in c's op, or its members', from its command's reply, and
// returns its error: for a luaBatch call, the first member's error that
// is not its own op's (see opOnly), else the first one.
func (s *Store) settle(c *call) error {
	if c.cmd == nil {
		return nil // failed alone, unsent (see errOutOfOrder)
	}
	if c.members == nil {
		c.op.Settled = true
		if err := c.cmd.Err(); err != nil {
			c.op.Failed = fmt.Errorf("redis: %w", err)
			return err
		}
		if c.script == nil || c.op.Reset != nil || c.op.TakeBack != nil {
			return nil
		}
		v, err := c.cmd.Slice()
		return settleHit(c.op, v, err)
	}
	v, err := c.cmd.Slice()
	if err == nil && len(v) != 5*len(c.members) {
		err = fmt.Errorf("redis: batch script reply: want %d values, got %d", 5*len(c.members), len(v))
	}
	if err != nil {
		for _, m := range c.members {
			settleHit(m.op, nil, err)
		}
		return err
	}
	var first error
	for i, m := range c.members {
		err := settleHit(m.op, v[5*i:5*i+5], nil)
		if err != nil && (first == nil || opOnly(first) && !opOnly(err)) {
			first = err
		}
	}
	return first
}

// settleHit fills in hit or peek o from its script's reply v (or the
// command's error err), and returns its error.
func settleHit(o *commit.Op, v []any, err error) error {
	o.Settled = true
	if err == nil && len(v) > 0 {
		if rerr, ok := v[0].(error); ok {
			err = rerr // its own command's error, in a luaBatch reply
		}
	}
	if err != nil {
		o.Failed = fmt.Errorf("redis: %w", err)
		return err
	}
	var n [5]int64
	if len(v) != 5 {
		err = fmt.Errorf("want 5 integers, got %d", len(v))
	}
	for i := 0; err == nil && i < 5; i++ {
		x, ok := v[i].(int64)
		if !ok {
			err = fmt.Errorf("want 5 integers, got %T at %d", v[i], i)
		}
		n[i] = x
	}
	if err != nil {
		o.Failed = fmt.Errorf("redis: script reply: %w", err)
		return o.Failed
	}
	h := o.Hit
	if h == nil {
		h = o.Peek
	}
	h.Result = driver.Hit{
		Allowed: n[0] == 1,
		State:   driver.State{Start: time.UnixMilli(n[1]), Count: n[2], Prev: n[3]},
		Now:     time.UnixMilli(n[4]),
	}
	return nil
}

// opOnly reports whether a command's error is its own key's doing (a
// foreign value at the key, a script error on its data), so that the rest
// of the batch stands and Health stays good; other errors (the server
// loading, read-only, out of memory, refusing writes after a failed save,
// a cluster without a slot's node) are the server's, and the batch fails
// as a whole.
func opOnly(err error) bool {
	var rerr goredis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	for _, p := range []string{"LOADING", "READONLY", "OOM", "MISCONF", "CLUSTERDOWN", "MASTERDOWN",
		"TRYAGAIN", "BUSY", "NOREPLICAS", "NOSCRIPT", "MOVED", "ASK"} {
		if goredis.HasErrorPrefix(err, p) {
			return false
		}
	}
	return true
}
