package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"

	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// The primary watch. Open judges the primary (every master of a cluster)
// against RequireDurable and Replicas; a failover puts another server in
// its place, which may not meet them (a replica promoted without an AOF,
// or with no replica of its own left). With either option set, the store
// judges the primaries again:
//
//   - before the first batch after a batch failed for the server's sake
//     (a failover fails those in flight: the old primary's connections
//     break, or it answers READONLY once demoted);
//   - on one server or Sentinel's primary, before a batch if the client
//     has dialled a connection since the last judgement, and after one
//     during which it did (the batch then fails if the server it ran on
//     may not count): a failover client dials the new primary, so no
//     batch is answered by a primary not judged since it took over;
//   - every heartbeatEvery, so that a CONFIG SET, or a cluster's
//     switch-over between batches, is noticed within a second.
//
// A primary that does not meet them fails every batch closed, with the
// reason (Health reports it, wrapping store.ErrUnhealthy), and is judged
// again before each batch until it does.
type primaryWatch struct {
	// stale makes the next batch judge the primaries before it is sent.
	stale atomic.Bool
	// short is set while WAIT falls short, so that a run of failed
	// batches logs once.
	short atomic.Bool
	// dials counts the connections the client has dialled (dialWatch);
	// judged is its value when the committer last judged the primary,
	// and is the committer's alone.
	dials  atomic.Int64
	judged int64

	mu  sync.Mutex // serializes verify; protects the fields below
	ids string     // the run_ids of the primaries last judged, sorted
	why error      // why they may not count; nil if they may
}

// errFewReplicas fails a batch, or Open, on a primary with fewer
// connected replicas than Options.Replicas, and errUnacked, which wraps
// it, a batch fewer replicas acknowledged within WAIT's timeout;
// errNotPrimary, on a server that is a replica now.
var (
	errFewReplicas = errors.New("redis: too few replicas")
	errUnacked     = fmt.Errorf("%w acknowledged in time", errFewReplicas)
	errNotPrimary  = errors.New("redis: not a primary")
)

// nodeConfig is what readNodes learns of one primary; "" is unknown.
type nodeConfig struct {
	addr, version, appendonly, appendfsync string
	maxmemory, policy                      string // maxmemory and maxmemory-policy
	runID, role                            string
	replicas                               int // replicas online (INFO replication)
}

// evicts reports whether n may evict keys porch wrote: a memory limit and
// a policy other than noeviction. Every porch key has a TTL, so the
// volatile-* policies prefer them.
func (n nodeConfig) evicts() bool {
	return n.maxmemory != "" && n.maxmemory != "0" && n.policy != "" && n.policy != "noeviction"
}

// readNodes reads every primary's identity, replicas and settings: the
// server's (a Sentinel client's current primary), or each master of a
// cluster. The settings come from CONFIG GET; a server that refuses it
// leaves them unknown.
func (s *Store) readNodes(ctx context.Context) ([]nodeConfig, error) {
	var (
		mu    sync.Mutex
		nodes []nodeConfig
	)
	read := func(ctx context.Context, addr string, c goredis.UniversalClient) error {
		n := nodeConfig{addr: addr}
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			return fmt.Errorf("redis: INFO server on %s: %w", addr, err)
		}
		n.version, n.runID = infoField(info, "redis_version"), infoField(info, "run_id")
		repl, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return fmt.Errorf("redis: INFO replication on %s: %w", addr, err)
		}
		n.role = infoField(repl, "role")
		n.replicas = strings.Count(repl, ",state=online,")
		if addr == "" {
			// A Sentinel client's primary is wherever Sentinel said; the
			// connection's local address names it in messages.
			n.addr = "the server"
			if ci, err := c.Do(ctx, "client", "info").Text(); err == nil {
				if _, a, ok := strings.Cut(ci, " laddr="); ok {
					n.addr, _, _ = strings.Cut(a, " ")
				}
			}
		}
		if cfg, err := c.ConfigGet(ctx, "append*").Result(); err == nil {
			n.appendonly, n.appendfsync = cfg["appendonly"], cfg["appendfsync"]
		}
		if cfg, err := c.ConfigGet(ctx, "maxmemory*").Result(); err == nil {
			n.maxmemory, n.policy = cfg["maxmemory"], cfg["maxmemory-policy"]
		}
		mu.Lock()
		nodes = append(nodes, n)
		mu.Unlock()
		return nil
	}
	err := s.roundTrip(ctx, func(ctx context.Context) error {
		if cc, ok := s.c.(*goredis.ClusterClient); ok {
			return cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
				return read(ctx, c.Options().Addr, c)
			})
		}
		addr := ""
		if c, ok := s.c.(*goredis.Client); ok && c.Options().Addr != "FailoverClient" {
			addr = c.Options().Addr
		}
		return read(ctx, addr, s.c)
	})
	if err != nil {
		if cc, ok := s.c.(*goredis.ClusterClient); ok {
			cc.ReloadState(ctx) // a master gone: the next read asks the cluster again
		}
		return nil, err
	}
	slices.SortFunc(nodes, func(a, b nodeConfig) int { return strings.Compare(a.addr, b.addr) })
	return nodes, nil
}

// unfit returns why nodes may not count under the store's options, or nil
// if they may: a replica where a primary should be, a primary that would
// forget a count under RequireDurable, or one with fewer online replicas
// than Replicas. The last is reported only when no node has another
// reason, so that errFewReplicas, which Open lets pass (see Open), never
// hides one it refuses.
func (s *Store) unfit(nodes []nodeConfig) error {
	for _, n := range nodes {
		if n.role != "" && n.role != "master" {
			return fmt.Errorf("%w: %s is a %s", errNotPrimary, n.addr, n.role)
		}
		if s.opt.RequireDurable {
			if n.evicts() {
				return fmt.Errorf("%w: the primary %s has maxmemory %s with maxmemory-policy %s, which may evict counters",
					ErrNotDurable, n.addr, n.maxmemory, n.policy)
			}
			fsyncs := n.appendonly == "yes" && n.appendfsync == "always"
			// WAITAOF, chosen at Open, confirms each batch's fsync itself.
			waits := s.waitAOF && versionAtLeast(n.version, 7, 2) && n.appendonly == "yes"
			if !fsyncs && !waits {
				return fmt.Errorf("%w: the primary %s (Redis %s) has appendonly=%s, appendfsync=%s",
					ErrNotDurable, n.addr, unknown(n.version), unknown(n.appendonly), unknown(n.appendfsync))
			}
		}
	}
	for _, n := range nodes {
		if n.replicas < s.opt.Replicas {
			return fmt.Errorf("%w: the primary %s has %d online replicas, and Options.Replicas is %d",
				errFewReplicas, n.addr, n.replicas, s.opt.Replicas)
		}
	}
	return nil
}

// openShort lets Open start on primaries with fewer replicas online than
// Options.Replicas (why, errFewReplicas): the state a failover leaves, and
// handled as one. Every batch judges the primaries again first, and fails
// closed with why until they may count.
func (s *Store) openShort(why error) {
	w := &s.watch
	w.mu.Lock()
	w.why = why
	w.mu.Unlock()
	w.stale.Store(true)
	commit.Log(s.opt.Logger).Error("redis: the primary may not count under the store's options; every batch fails closed until it may", "err", why)
}

// runIDs names nodes by their run_ids: a restarted or promoted server has
// another.
func runIDs(nodes []nodeConfig) string {
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = n.runID
	}
	slices.Sort(ids)
	return strings.Join(ids, ",")
}

// watching reports whether the store judges its primaries after Open: only
// RequireDurable and Replicas make a primary unfit to count.
func (s *Store) watching() bool { return s.opt.RequireDurable || s.opt.Replicas > 0 }

// verify judges the primaries as they are now, logs a new primary and a
// change of verdict, and returns why they may not count (nil if they may),
// or err, what kept it from reading them.
func (s *Store) verify(ctx context.Context) (why, err error) {
	nodes, err := s.readNodes(ctx)
	if err != nil {
		return nil, err
	}
	w := &s.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	log := commit.Log(s.opt.Logger)
	if ids := runIDs(nodes); ids != w.ids {
		addrs := make([]string, len(nodes))
		for i, n := range nodes {
			addrs[i] = n.addr
		}
		log.Warn("redis: a new primary; judging it against the store's options", "primaries", strings.Join(addrs, ","),
			"run_ids", ids, "was", w.ids)
		w.ids = ids
		s.warnForgetful(nodes)
	}
	why = s.unfit(nodes)
	switch {
	case why != nil && (w.why == nil || w.why.Error() != why.Error()):
		log.Error("redis: the primary may not count under the store's options; every batch fails closed until it may", "err", why)
	case why == nil && w.why != nil:
		log.Info("redis: the primary meets the store's options again; batches are sent", "was", w.why)
	}
	w.why = why
	return why, nil
}

// watched sends a batch's calls (run) under the primary watch: the
// primaries are judged before it if a failed batch or the heartbeat
// asked, or a connection was dialled since they last were, and after it if
// one was dialled meanwhile. An error from either judgement fails the
// batch, as run's does.
func (s *Store) watched(calls []*call) error {
	w := &s.watch
	if !s.watching() {
		return s.run(calls)
	}
	if w.stale.Load() || w.dials.Load() != w.judged {
		if err := s.judge(); err != nil {
			return err
		}
	}
	if err := s.run(calls); err != nil {
		// The server failed the batch: it may be another one now (a
		// failover), to judge before the next batch is sent.
		w.stale.Store(true)
		return err
	}
	if w.dials.Load() != w.judged {
		// The batch may have run on a connection to a server not judged
		// yet: its hits counted there, but none is answered, each op's own
		// outcome included, unless that server may count.
		if err := s.judge(); err != nil {
			for _, c := range calls {
				c.each(func(m *call) { m.op.Settled, m.op.Failed = false, nil })
			}
			return err
		}
	}
	return nil
}

// judge is verify in the committer: its error fails the batch, and leaves
// the next one to judge again.
func (s *Store) judge() error {
	why, err := s.verify(context.Background())
	if err == nil {
		err = why
	}
	if err != nil {
		s.watch.stale.Store(true)
		return err
	}
	s.watch.stale.Store(false)
	// Dials during verify reached the server it judged.
	s.watch.judged = s.watch.dials.Load()
	return nil
}

// dialWatch counts a client's new connections (see primaryWatch): after a
// failover, a client's next connection is to another server.
type dialWatch struct{ dials *atomic.Int64 }

func (d dialWatch) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err == nil {
			d.dials.Add(1)
		}
		return conn, err
	}
}

func (dialWatch) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }

func (dialWatch) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// watchBeat is the heartbeat's look at the primaries: one found unfit makes
// the next batch judge them again before it is sent (and so fail). An
// unreachable server is left to the batches, which fail on their own.
func (s *Store) watchBeat() {
	if !s.watching() {
		return
	}
	if why, _ := s.verify(context.Background()); why != nil {
		s.watch.stale.Store(true)
	}
}

// ackedBy reads WAIT's reply: how many replicas hold the batch.
func ackedBy(wait *goredis.IntCmd, want int, ms int64) error {
	n, err := wait.Result()
	if err != nil {
		return fmt.Errorf("redis: WAIT: %w", err)
	}
	if n < int64(want) {
		return fmt.Errorf("%w: %d of %d replicas acknowledged the batch within %dms (WAIT), so its hits are not answered: a failover could forget them",
			errUnacked, n, want, ms)
	}
	return nil
}
