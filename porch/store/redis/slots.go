package redis

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/slotq"
)

var _ driver.SharedSlots = (*Store)(nil)

// A key's slots are a sorted set under counterKey's name (so with its hash
// tag: one principal's counters and slots share a cluster slot), each
// member a holder's id scored by its lease's end in Unix ms on the
// server's clock (TIME). The set itself expires a lease after its last
// write, so an abandoned key leaves nothing behind.

// luaAcquireSlot: KEYS[1] the set; ARGV id, limit, lease ms. Drops
// expired members, then adds id if fewer than limit are live. Returns
// {taken (0 or 1), live members after}.
const luaAcquireSlot = `
if redis.replicate_commands then pcall(redis.replicate_commands) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit, lease = tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local n = redis.call('ZCARD', KEYS[1])
if n >= limit then return {0, n} end
redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
if redis.call('PTTL', KEYS[1]) < lease then redis.call('PEXPIRE', KEYS[1], lease) end
return {1, n + 1}
`

// luaRenewSlots: KEYS[1] the set; ARGV lease ms, then ids. Extends each
// live id's lease (ZADD XX: an expired or released id is not added back).
// Returns how many were not live.
const luaRenewSlots = `
if redis.replicate_commands then pcall(redis.replicate_commands) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
local lost = 0
for i = 2, #ARGV do
  local s = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if s and tonumber(s) > now then
    redis.call('ZADD', KEYS[1], 'XX', now + lease, ARGV[i])
  else
    lost = lost + 1
  end
end
if lost < #ARGV - 1 and redis.call('PTTL', KEYS[1]) < lease then redis.call('PEXPIRE', KEYS[1], lease) end
return lost
`

var (
	scriptAcquireSlot = goredis.NewScript(luaAcquireSlot)
	scriptRenewSlots  = goredis.NewScript(luaRenewSlots)
)

// SlotsShared reports true: every instance sharing the server counts the
// same slots (see driver.Slots).
func (s *Store) SlotsShared() bool { return true }

// AcquireSlot takes one of limit slots of key for id, leased for lease on
// the server's clock, in one script (see driver.SharedSlots), bounded by
// Options.Timeout. Without Options.Replicas the script is sent in the next
// pipeline of slot calls (see newSlotQueue). With Options.Replicas the script
// is followed by WAIT on its connection, as a batch of hits is, and an
// acquire fewer replicas acknowledged fails (its request is answered 503,
// and the slot given back): a failover to a replica that had not received
// it would forget the slot and admit one request more than the limit.
func (s *Store) AcquireSlot(ctx context.Context, key, id string, limit int64, lease time.Duration) (ok bool, held int64, err error) {
	var res []int64
	k := s.counterKey(key)
	if s.opt.Replicas == 0 {
		c := &slotq.Call[slotOp]{Op: slotOp{key: k, id: id, limit: limit, lease: lease.Milliseconds()}, Acquire: true}
		if err := s.slots.Do(ctx, c); err != nil {
			return false, 0, fmt.Errorf("redis: acquire slot: %w", err)
		}
		res = c.Op.res
	} else {
		err = s.roundTrip(ctx, func(ctx context.Context) error {
			var on goredis.Cmdable = s.c
			if cc, ok := s.c.(*goredis.ClusterClient); ok {
				node, err := cc.MasterForKey(ctx, k)
				if err != nil {
					cc.ReloadState(ctx)
					return fmt.Errorf("the master of %s: %w", k, err)
				}
				on = node
			}
			pipe := on.Pipeline()
			cmd := scriptAcquireSlot.Eval(ctx, pipe, []string{k}, id, limit, lease.Milliseconds())
			waitMS := s.waitBudget(ctx)
			wait := goredis.NewIntCmd(ctx, "wait", s.opt.Replicas, waitMS)
			pipe.Process(ctx, wait)
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
			r, err := cmd.Int64Slice()
			if err != nil {
				return err
			}
			res = r
			return ackedBy(wait, s.opt.Replicas, waitMS)
		})
		if err != nil {
			return false, 0, fmt.Errorf("redis: acquire slot: %w", err)
		}
	}
	if len(res) != 2 {
		return false, 0, fmt.Errorf("redis: acquire slot: the script answered %v", res)
	}
	return res[0] == 1, res[1], nil
}

// ReleaseSlot removes id from key's set, in the next pipeline of slot
// calls (see newSlotQueue), bounded by Options.Timeout.
func (s *Store) ReleaseSlot(ctx context.Context, key, id string) error {
	if err := s.slots.Do(ctx, &slotq.Call[slotOp]{Op: slotOp{key: s.counterKey(key), id: id}}); err != nil {
		return fmt.Errorf("redis: release slot: %w", err)
	}
	return nil
}

// maxSlotPipeline bounds the slot calls one pipeline carries.
const maxSlotPipeline = 256

// newSlotQueue returns s's queue of slot calls (acquires without
// Options.Replicas, releases), which sends the calls of concurrent
// requests together: one goroutine at a time sends every call queued in
// one pipeline, one round trip, then the calls that queued meanwhile in
// the next. One round trip per call was the in-flight limiter's cost on
// Redis: two per request, each a write, a read and a wake-up of the
// server and of the caller, which on a loaded machine took longer than
// the server's work (see docs/inflight.md). Each call is its own command,
// atomic on the server as before: a pipeline only shares the round trip.
func (s *Store) newSlotQueue() *slotq.Queue[slotOp] {
	return &slotq.Queue[slotOp]{Send: s.sendSlots, Senders: 1, Max: maxSlotPipeline, Timeout: s.opt.Timeout}
}

// slotOp is one slot call's arguments and, once settled, its outcome.
type slotOp struct {
	key, id string
	limit   int64
	lease   int64 // ms
	res     []int64
}

// sendSlots sends calls in one pipeline, bounded by Options.Timeout, and
// settles each. An acquire whose script the server had not cached
// (NOSCRIPT: a restart, a failover, SCRIPT FLUSH) is sent again alone, as
// Script.Run would.
func (s *Store) sendSlots(calls []*slotq.Call[slotOp]) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opt.Timeout)
	defer cancel()
	acq := make([]*goredis.Cmd, len(calls))
	rel := make([]*goredis.IntCmd, len(calls))
	// A pipeline that fails as a whole (a lost connection, the deadline)
	// sets its error on every command, read below.
	s.c.Pipelined(ctx, func(p goredis.Pipeliner) error { //nolint:errcheck // read per command
		for i, c := range calls {
			if c.Acquire {
				acq[i] = scriptAcquireSlot.EvalSha(ctx, p, []string{c.Op.key}, c.Op.id, c.Op.limit, c.Op.lease)
			} else {
				rel[i] = p.ZRem(ctx, c.Op.key, c.Op.id)
			}
		}
		return nil
	})
	for i, c := range calls {
		var err error
		switch op := &c.Op; {
		case c.Acquire:
			op.res, err = acq[i].Int64Slice()
			if err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
				op.res, err = scriptAcquireSlot.Run(ctx, s.c, []string{op.key}, op.id, op.limit, op.lease).Int64Slice()
			}
		default:
			err = rel[i].Err()
		}
		c.Settle(err)
	}
}

// RenewSlots extends the leases of held: one script per key, every key's
// in one pipeline (on a cluster, go-redis sends each node its share),
// bounded by Options.Timeout.
func (s *Store) RenewSlots(ctx context.Context, held []driver.SlotRef, lease time.Duration) (lost int, err error) {
	if len(held) == 0 {
		return 0, nil
	}
	byKey := make(map[string][]any, len(held))
	order := make([]string, 0, len(held))
	for _, h := range held {
		if _, ok := byKey[h.Key]; !ok {
			order = append(order, h.Key)
			byKey[h.Key] = []any{lease.Milliseconds()}
		}
		byKey[h.Key] = append(byKey[h.Key], h.ID)
	}
	var counts []int64
	err = s.roundTrip(ctx, func(ctx context.Context) error {
		cmds := make([]*goredis.Cmd, len(order))
		// A pipeline that fails as a whole (a lost connection, the deadline)
		// sets its error on every command, read below.
		s.c.Pipelined(ctx, func(p goredis.Pipeliner) error { //nolint:errcheck // read per command
			for i, k := range order {
				// EVAL, not EVALSHA: a pipeline cannot fall back from
				// NOSCRIPT, and a primary that took over may not have
				// the script cached.
				cmds[i] = scriptRenewSlots.Eval(ctx, p, []string{s.counterKey(k)}, byKey[k]...)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, c := range cmds {
			n, err := c.Int64()
			if err != nil {
				return err
			}
			counts = append(counts, n)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("redis: renew slots: %w", err)
	}
	for _, n := range counts {
		lost += int(n)
	}
	return lost, nil
}
