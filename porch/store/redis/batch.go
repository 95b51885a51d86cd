package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// noRetry is a script call go-redis must not send again after a network
// error: the server may have run it, and a second run would count twice.
type noRetry struct{ *goredis.Cmd }

func (noRetry) NoRetry() bool { return true }

// errOutOfOrder fails a call the server refused for a missing script
// while a later call of its key ran (see writeBatch).
var errOutOfOrder = errors.New("redis: the server lacked this call's script while a later call of its key ran; not sent again out of order, retry it")

// call is one op's command in a batch's pipeline, or one luaBatch call
// of several (members).
type call struct {
	op     *commit.Op
	script *goredis.Script // nil for Health's probe
	key    string
	args   []any
	cmd    *goredis.Cmd
	// members are a luaBatch call's hits, each with its own op, key,
	// script and arguments, and no command of its own.
	members []*call
}

// each calls f with c, or with each of a luaBatch call's members: the
// calls that have an op and a key.
func (c *call) each(f func(*call)) {
	if c.members == nil {
		f(c)
		return
	}
	for _, m := range c.members {
		f(m)
	}
}

// maxMembers bounds a luaBatch call: the server runs nothing else while a
// script runs.
const maxMembers = 128

// batchCalls replaces each run of two or more consecutive hits and peeks
// in calls by one luaBatch call of them (at most maxMembers each): one
// script call instead of one per hit, which is most of what a hit costs
// the server. Runs end at every other op, so that every key's ops keep
// their order. Not on a cluster, where one script's keys must share a
// slot; a cluster sends each hit as its own call.
func batchCalls(calls []*call) []*call {
	out := calls[:0:0]
	var run []*call
	flush := func() {
		switch {
		case len(run) == 1:
			out = append(out, run[0])
		case len(run) > 1:
			out = append(out, &call{script: scriptBatch, members: run})
		}
		run = nil
	}
	for _, c := range calls {
		if batchCodes[c.script] == "" {
			flush()
			out = append(out, c)
			continue
		}
		run = append(run, c)
		if len(run) == maxMembers {
			flush()
		}
	}
	flush()
	return out
}

// writeBatch sends every op of batch as one EVALSHA each, in arrival
// order, in one pipeline (a cluster client splits it by node, keeping each
// node's share in order, so a key's ops stay in order). Ops whose script
// the server lacked (NOSCRIPT: a restarted node) are sent again once the
// scripts are loaded. Each op is settled with its own outcome; the batch
// fails as a whole (every op gets the error) when its round trip failed or
// timed out, or WAITAOF did not confirm the fsync.
func (s *Store) writeBatch(batch []commit.Op) error {
	if s.opt.CommitDelay > 0 {
		time.Sleep(s.opt.CommitDelay) // fault injection: a slow server
	}
	calls := make([]*call, 0, len(batch))
	all := make([]call, len(batch)) // one allocation for the batch's calls
	for i := range batch {
		o := &batch[i]
		c := &all[i]
		c.op = o
		switch {
		case o.Hit != nil:
			a, err := s.hitArgs(o.Hit.Rule)
			if err != nil {
				o.Settled, o.Failed = true, err
				continue
			}
			c.script, c.key, c.args = a.script, s.counterKey(o.Hit.Key), append(append(make([]any, 0, 5+len(a.args)), o.Hit.N), a.args...)
			if h := o.Hit; h.Held > 0 || h.Settled > 0 || h.Adopted > 0 {
				// After the rule's: fixed and sliding windows only, whose
				// arguments are the limit and the window.
				c.args = append(c.args, h.Held, h.Settled, h.LeaseStart, h.Adopted)
			}
		case o.Peek != nil:
			a, err := s.hitArgs(o.Peek.Rule)
			if err != nil {
				o.Settled, o.Failed = true, err
				continue
			}
			c.script, c.key, c.args = a.script, s.counterKey(o.Peek.Key), append([]any{0}, a.args...)
		case o.Reset != nil:
			c.script, c.key = scriptReset, s.counterKey(o.Reset.Key)
		case o.TakeBack != nil:
			tb := o.TakeBack
			lease := 0
			if tb.Lease {
				lease = 1
			}
			c.script, c.key, c.args = scriptTakeBack, s.counterKey(tb.Key), []any{tb.WindowStart, tb.N, lease, tb.Settled}
		case o.Probe:
			c.key = s.opt.Prefix + "health:" + s.id
		default:
			o.Settled, o.Failed = true, errors.New("redis: the store keeps only rate counters")
			continue
		}
		calls = append(calls, c)
	}
	if len(calls) == 0 {
		return nil
	}
	if s.oneServer {
		calls = batchCalls(calls)
	}
	err := s.watched(calls)
	if s.opt.Replicas > 0 {
		s.logShort(err)
	}
	return err
}

// run sends calls, again those whose script the server lacked, and
// settles each; its error fails the batch.
func (s *Store) run(calls []*call) error {
	if err := s.send(calls); err != nil {
		return err
	}
	var missing []*call
	ran := make(map[string]bool) // keys with a call that ran after the one looked at
	for i := len(calls) - 1; i >= 0; i-- {
		c := calls[i]
		if c.script == nil || !goredis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") {
			c.each(func(m *call) { ran[m.key] = true })
			continue
		}
		later := false
		c.each(func(m *call) { later = later || ran[m.key] })
		if later {
			// A later call of one of its keys ran without it (the server
			// had some scripts and not others: a reload under way): sent
			// again now, it would run out of order — a reset after a hit
			// it should have come before erases a count answered allowed.
			// It fails instead (every member of a luaBatch call), and its
			// caller retries it.
			c.each(func(m *call) { m.op.Settled, m.op.Failed = true, errOutOfOrder })
			c.cmd = nil
			continue
		}
		missing = append(missing, c)
	}
	slices.Reverse(missing)
	if len(missing) > 0 {
		// The scripts did not run: sending them again cannot count twice.
		if err := s.loadScripts(context.Background()); err != nil {
			return err
		}
		if err := s.send(missing); err != nil {
			return err
		}
	}
	var batchErr error
	for _, c := range calls {
		err := s.settle(c)
		if err != nil && batchErr == nil && !opOnly(err) {
			batchErr = err
		}
	}
	return batchErr
}

// send runs calls in one pipeline, ended by WAITAOF and WAIT when the
// store needs them; on a cluster that waits for replicas, one pipeline per
// node, each ended by its WAIT (see sendNodes). Its error fails the whole
// batch: the calls' results must then not be read (a timed-out pipeline
// may still be filling them in).
func (s *Store) send(calls []*call) error {
	return s.roundTrip(context.Background(), func(ctx context.Context) error {
		if cc, ok := s.c.(*goredis.ClusterClient); ok && s.opt.Replicas > 0 {
			return s.sendNodes(ctx, cc, calls)
		}
		return s.pipe(ctx, s.c, calls)
	})
}

// sendNodes sends calls to their keys' masters, one pipeline each, at once:
// WAIT counts the replicas that hold this connection's writes, so each
// node's share must end with its own. A slot that moved since the client
// last read the cluster's map fails the batch (MOVED is the server's
// error), and the map is read again for the next one.
func (s *Store) sendNodes(ctx context.Context, cc *goredis.ClusterClient, calls []*call) error {
	var nodes []*goredis.Client
	shares := make(map[*goredis.Client][]*call)
	for _, c := range calls {
		node, err := cc.MasterForKey(ctx, c.key)
		if err != nil {
			cc.ReloadState(ctx)
			return fmt.Errorf("redis: the master of %s: %w", c.key, err)
		}
		if _, ok := shares[node]; !ok {
			nodes = append(nodes, node)
		}
		shares[node] = append(shares[node], c)
	}
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, node := range nodes {
		wg.Go(func() {
			if errs[i] = s.pipe(ctx, node, shares[node]); errs[i] != nil {
				errs[i] = fmt.Errorf("%s: %w", node.Options().Addr, errs[i])
			}
		})
	}
	wg.Wait()
	for _, c := range calls {
		if err := c.cmd.Err(); goredis.HasErrorPrefix(err, "MOVED") || goredis.HasErrorPrefix(err, "ASK") {
			cc.ReloadState(ctx)
			break
		}
	}
	for _, err := range errs {
		if err != nil {
			return err // one line: every node's would say much the same
		}
	}
	return nil
}

// pipe runs calls in one pipeline on on, ended by WAITAOF and WAIT when the
// store needs them: on one connection, so that they wait for these calls'
// writes.
func (s *Store) pipe(ctx context.Context, on goredis.Cmdable, calls []*call) error {
	pipe := on.Pipeline()
	for _, c := range calls {
		if c.script == nil {
			c.cmd = goredis.NewCmd(ctx, "set", c.key, "1", "px", 1000)
			pipe.Process(ctx, c.cmd)
			continue
		}
		c.cmd = goredis.NewCmd(ctx, c.evalArgs()...)
		pipe.Process(ctx, noRetry{c.cmd})
	}
	var waitAOF *goredis.IntSliceCmd
	if s.waitAOF {
		waitAOF = goredis.NewIntSliceCmd(ctx, "waitaof", 1, 0, s.opt.Timeout.Milliseconds())
		pipe.Process(ctx, waitAOF)
	}
	var wait *goredis.IntCmd
	var waitMS int64
	if s.opt.Replicas > 0 {
		waitMS = s.waitBudget(ctx)
		wait = goredis.NewIntCmd(ctx, "wait", s.opt.Replicas, waitMS)
		pipe.Process(ctx, wait)
	}
	_, err := pipe.Exec(ctx)
	var rerr goredis.Error
	if err != nil && !errors.As(err, &rerr) {
		return fmt.Errorf("redis: %w", err) // the connection, not a command
	}
	if waitAOF != nil {
		r, err := waitAOF.Result()
		if err != nil {
			return fmt.Errorf("redis: WAITAOF: %w", err)
		}
		if len(r) == 0 || r[0] < 1 {
			return fmt.Errorf("redis: WAITAOF 1 0 %d: the AOF was not fsynced in time (%v)", s.opt.Timeout.Milliseconds(), r)
		}
	}
	if wait != nil {
		return ackedBy(wait, s.opt.Replicas, waitMS)
	}
	return nil
}

// waitBudget is WAIT's timeout in ms: three quarters of what is left of
// the round trip's, so that WAIT answers with its count (which says why
// the batch failed) before the round trip gives up on it, and never 0,
// which would wait for ever.
func (s *Store) waitBudget(ctx context.Context) int64 {
	left := s.opt.Timeout
	if dl, ok := ctx.Deadline(); ok {
		left = time.Until(dl)
	}
	return max(1, (left * 3 / 4).Milliseconds())
}

// logShort logs when batches start failing for want of replicas'
// acknowledgements, and when they stop, once each way: every batch of a
// run fails alike, and Health says so meanwhile. It says which want: too
// few replicas online, so that batches are not sent, or a WAIT that timed
// out on replicas that are online but lag or stall; an operator mends the
// one in the replication links and the other in the replicas' load.
func (s *Store) logShort(err error) {
	short := errors.Is(err, errFewReplicas)
	if s.watch.short.Swap(short) == short {
		return
	}
	if short && errors.Is(err, errUnacked) {
		commit.Log(s.opt.Logger).Error("redis: replicas do not acknowledge batches in time; their hits fail closed", "replicas", s.opt.Replicas, "err", err)
		return
	}
	if short {
		commit.Log(s.opt.Logger).Error("redis: too few replicas online; batches are not sent and their hits fail closed", "replicas", s.opt.Replicas, "err", err)
		return
	}
	if err == nil {
		commit.Log(s.opt.Logger).Info("redis: replicas acknowledge batches again", "replicas", s.opt.Replicas)
	}
}

// evalArgs are c's EVALSHA command.
func (c *call) evalArgs() []any {
	if c.members == nil {
		return append([]any{"evalsha", c.script.Hash(), 1, c.key}, c.args...)
	}
	n := 3 + len(c.members)
	for _, m := range c.members {
		n += 2 + len(m.args)
	}
	args := append(make([]any, 0, n), "evalsha", c.script.Hash(), len(c.members))
	for _, m := range c.members {
		args = append(args, m.key)
	}
	hits := make(map[string]int, len(c.members))
	for _, m := range c.members {
		hits[m.key]++
	}
	for _, m := range c.members {
		code := batchCodes[m.script]
		if hits[m.key] > 1 {
			code = viewCodes[m.script]
		}
		args = append(args, code, len(m.args))
		args = append(args, m.args...)
	}
	return args
}
