package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
	"github.com/writeonce/porch-go/porch/store/internal/policy"
	"github.com/writeonce/porch-go/porch/store/internal/slotq"
)

// defaultTimeout is Options.Timeout's default.
const defaultTimeout = 250 * time.Millisecond

// defaultPrefix is Options.Prefix's default.
const defaultPrefix = "porch:"

// ErrNotDurable is returned by Open with Options.RequireDurable when the
// server cannot make a count durable before its reply: neither
// appendonly yes with appendfsync always, nor (Redis 7.2 or later, one
// node) appendonly yes with WAITAOF.
var ErrNotDurable = errors.New("redis: the server cannot make a count durable before its reply (set appendonly yes and appendfsync always)")

// Options configure a Store.
type Options struct {
	// Options are the committer's: Clock (the wall clock, for headers
	// only: windows are measured on the server's clock), QueueSize,
	// MaxBatch, Observer, Logger and CommitDelay. Open refuses a PruneRows
	// other than zero: Redis expires porch's keys itself, and there are no
	// rows to prune.
	store.Options
	// Prefix starts every key porch writes. If empty, "porch:". It must
	// not contain '{' or '}', which would move the keys' hash slot.
	Prefix string
	// Timeout bounds each round trip to Redis. A batch whose round trip
	// errs or outlasts it fails closed: its hits get the error (their
	// requests are answered 503), though Redis may still apply them, which
	// only ever counts high. If zero (or negative), 250 ms: a round trip
	// to a healthy Redis takes well under a millisecond, and a hit waits
	// at most this long before its request is answered 503.
	Timeout time.Duration
	// RequireDurable makes Open refuse, with ErrNotDurable, a server that
	// cannot make a count durable before it replies (see Open). Open
	// refuses it with Durability store.SurvivesProcessCrash, which asks
	// for less. A primary that takes over later (a failover) and cannot
	// fails every batch closed until it can (see the package doc).
	RequireDurable bool
	// Replicas is how many replicas must hold a batch before its hits are
	// answered: each batch's pipeline ends with WAIT Replicas, bounded by
	// what is left of Timeout, on the connection that ran it (on a
	// cluster, each node's share waits for that node's own replicas). A
	// batch that fewer replicas acknowledged in time fails closed, as a
	// timed-out one does, though its hits were counted on the primary.
	// A primary with fewer replicas online (at Open, or one that takes
	// over later) fails every batch closed until they are (see Open). Set
	// it to every replica: WAIT counts any Replicas of them, and
	// a failover while the old primary lives on (a pause, a manual
	// failover) may promote one that did not acknowledge, which forgets
	// the batch's answered hits (Open logs a warning when Replicas is
	// below the primary's online replicas). If zero, no batch waits: a hit
	// is answered once the primary ran it, and a failover to a replica
	// that had not received it forgets it.
	Replicas int
}

// Store counts rate limits in Redis (a single server, Sentinel's primary,
// or a Redis Cluster), shared by every instance that opens it: each hit is
// decided by one Lua script on the server, atomically for its key, on the
// server's clock. It holds counters, never idempotency keys (see the
// package doc), so idem.New does not accept it. Create it with Open; it is
// safe for concurrent use.
//
// Pass it to rate.New, idem.New or kit; an application calls Close, Health and Stats. Its
// other methods implement porch/store/driver for those packages and are
// not for calling directly.
type Store struct {
	c       goredis.UniversalClient
	cluster bool
	// oneServer is set for a client that sends a whole script call to one
	// server (a plain or Sentinel client), so that a call may carry many
	// keys' hits (see batchCalls). A Ring, like a Cluster, routes a call
	// by its first key: a batch there would count the others on the
	// wrong shard.
	oneServer bool
	opt       Options
	id        string // this instance, in policy claims
	waitAOF   bool   // end every batch with WAITAOF 1 0 (see Open)
	commit    *commit.Committer

	watch primaryWatch // judges a new primary (see verify)

	rules   atomic.Pointer[map[ruleKey]hitArgs] // read without a lock, copied on write (see hitArgs); nil until the first
	rulesMu sync.Mutex                          // serializes writers of rules

	claims   policy.Claims
	policyMu sync.Mutex               // serializes claims, releases and heartbeats; protects held
	held     map[string]driver.Policy // names claimed in Redis, by name

	slots *slotq.Queue[slotOp] // the slot calls waiting for a pipeline (see newSlotQueue)

	stop      chan struct{}
	stopped   chan struct{}
	closeOnce sync.Once
}

var (
	_ driver.Store          = (*Store)(nil)
	_ driver.SharedCounters = (*Store)(nil)
)

// openPing bounds Open's first ping (see Open).
const openPing = 5 * time.Second

// Open returns a store that counts in c's server(s). It pings the server,
// loads the scripts and checks how durable a count is:
//
//   - appendonly yes with appendfsync always on every node: a count is on
//     disk before Redis replies, so before a hit's done runs;
//   - with RequireDurable, otherwise, on one node of Redis 7.2 or later
//     with appendonly yes: every batch ends with WAITAOF 1 0, and fails
//     unless the server reports its AOF fsynced; Open checks once that
//     WAITAOF answers so;
//   - otherwise, with RequireDurable, Open fails with ErrNotDurable naming
//     the setting; without it, Open logs once (Options.Logger) that a
//     restart or a failover may forget counts: clients then get a fresh
//     allowance, never a second execution of anything, since idempotency
//     keys never live here.
//
// Options.Durability changes nothing Redis does: a hit's verdict always
// comes after the server's reply, so a kill -9 of the application loses no
// count at either level, and what a crash of the server loses is its
// appendfsync's to decide. With store.SurvivesProcessCrash, Open asks no
// more of the server: it accepts appendonly yes with any appendfsync
// without a warning, and refuses RequireDurable.
//
// With Options.Replicas, Open does not refuse a primary with fewer
// replicas online than it: replicas still in their first sync (Redis 7
// starts one only after repl-diskless-sync-delay, 5 s by default) or not
// yet connected are how a primary, its replicas and the application look
// when started together, and a refusal would crash-loop the application
// until they are online. The store opens as it would be after a failover
// to such a primary: every batch fails closed (its requests are answered
// 503), Health says why, the log says so once, and the first batch after
// they are online is counted. A setting the primary does not meet under
// RequireDurable is a misconfiguration, not a wait, and Open refuses it,
// as it refuses a server that does not answer or a Sentinel that names
// no primary.
//
// The check reads INFO server and replication and CONFIG GET
// appendonly/appendfsync; a server where CONFIG is renamed or disabled
// counts as not durable unless WAITAOF answers. With RequireDurable or
// Replicas, it is made again on every new primary and every second (see
// the package doc), and Open adds a hook to a non-cluster c to learn of
// its new connections; without them it is made at Open only, and a CONFIG
// SET afterwards is not noticed.
//
// c is a client of one server (goredis.NewClient), of a Sentinel setup
// (goredis.NewFailoverClient) or of a Cluster (goredis.NewClusterClient).
// Open refuses a Ring: it shards keys by a hash of its own, so scripts
// loaded and counts made through one server would be missed on another.
//
// The caller owns c: Close does not close it. A client with
// ContextTimeoutEnabled drops a connection whose round trip outlasted
// Options.Timeout instead of waiting out its ReadTimeout.
func Open(ctx context.Context, c goredis.UniversalClient, opt Options) (*Store, error) {
	if c == nil {
		return nil, errors.New("redis: Open needs a client")
	}
	if opt.PruneRows != 0 {
		return nil, fmt.Errorf("redis: Open expects no Options.PruneRows, got %d: Redis expires porch's keys itself, and there are no rows to prune", opt.PruneRows)
	}
	if err := commit.CheckDurability("redis", opt.Durability); err != nil {
		return nil, err
	}
	if opt.RequireDurable && opt.Durability == store.SurvivesProcessCrash {
		return nil, errors.New("redis: Options.RequireDurable asks that a count be on the server's disk before its reply, and Durability store.SurvivesProcessCrash that it need not be; set one of them")
	}
	if _, ok := c.(*goredis.Ring); ok {
		return nil, errors.New("redis: a Ring is not supported: its client-side sharding routes a script call by its first key and loads scripts on one shard; use a Cluster to spread counters over servers")
	}
	if opt.Replicas < 0 {
		return nil, fmt.Errorf("redis: Options.Replicas must not be negative, got %d", opt.Replicas)
	}
	if opt.Prefix == "" {
		opt.Prefix = defaultPrefix
	}
	if strings.ContainsAny(opt.Prefix, "{}") {
		return nil, fmt.Errorf("redis: Options.Prefix %q contains a brace, which would set the keys' hash slot", opt.Prefix)
	}
	if opt.Timeout <= 0 {
		opt.Timeout = defaultTimeout
	}
	opt.Options = commit.WithDefaults(opt.Options)
	var b [8]byte
	rand.Read(b[:])
	_, cluster := c.(*goredis.ClusterClient)
	_, oneServer := c.(*goredis.Client) // a Sentinel failover client is one too
	s := &Store{c: c, cluster: cluster, oneServer: oneServer, opt: opt, id: hex.EncodeToString(b[:]),
		held: make(map[string]driver.Policy), stop: make(chan struct{}), stopped: make(chan struct{})}
	s.slots = s.newSlotQueue()
	// The first ping gets longer than a batch's Timeout, and its own error:
	// a failover client spends its first call asking the Sentinels for the
	// primary, and the reason it may fail (no Sentinel answers, a wrong
	// master name, a server that is no Sentinel) is what an operator needs
	// to read, not that the budget ran out.
	pctx, cancel := context.WithTimeout(ctx, max(opt.Timeout, openPing))
	err := c.Ping(pctx).Err()
	cancel()
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("redis: ping: no reply within %s from the server, the cluster or any Sentinel", max(opt.Timeout, openPing))
	}
	if err != nil {
		return nil, fmt.Errorf("redis: ping: %w", err)
	}
	nodes, err := s.checkDurable(ctx)
	if err != nil && !errors.Is(err, errFewReplicas) {
		return nil, err
	}
	s.watch.ids = runIDs(nodes)
	if err != nil {
		s.openShort(err)
	}
	if _, ok := c.(*goredis.ClusterClient); !ok && s.watching() {
		c.AddHook(dialWatch{&s.watch.dials})
	}
	s.watch.judged = s.watch.dials.Load()
	if err := s.loadScripts(ctx); err != nil {
		return nil, err
	}
	s.commit = commit.New(s.writeBatch, opt.Clock, opt.QueueSize, opt.MaxBatch, opt.Observer)
	go s.heartbeat()
	return s, nil
}

// roundTrip runs f under ctx and Options.Timeout, and returns once either
// ends: f's client may not honour the deadline (ContextTimeoutEnabled
// unset), so a late f is left to finish on its own, and what it fills in
// must not be read after a timeout.
func (s *Store) roundTrip(parent context.Context, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(parent, s.opt.Timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		if err := parent.Err(); err != nil {
			return err // the caller gave up: its own context's error
		}
		// Not wrapping context.DeadlineExceeded: the server failed to
		// answer, which is a store failure to log and count, not a request
		// that ended (the middlewares' fail-closed answer tells them apart
		// by it, and logs only the store failure).
		return fmt.Errorf("redis: no reply within %s", s.opt.Timeout)
	}
}

// loadScripts loads every script into every node's script cache.
func (s *Store) loadScripts(ctx context.Context) error {
	for _, sc := range allScripts {
		err := s.roundTrip(ctx, func(ctx context.Context) error { return sc.Load(ctx, s.c).Err() })
		if err != nil {
			return fmt.Errorf("redis: load scripts: %w", err)
		}
	}
	return nil
}

// checkDurable decides how durable a count is, and whether the primary
// may count at all under the store's options (see Open). It returns what
// it read, so that the primary watch (see verify) knows which primary Open
// judged.
func (s *Store) checkDurable(ctx context.Context) ([]nodeConfig, error) {
	nodes, err := s.readNodes(ctx)
	if err != nil {
		return nil, err
	}
	// Eviction forgets a count as a restart does: a client at its limit is
	// allowed again. Durable means neither may happen.
	for _, n := range nodes {
		if n.evicts() && s.opt.RequireDurable {
			return nil, fmt.Errorf("%w: %s has maxmemory %s with maxmemory-policy %s, which may evict counters (set maxmemory-policy noeviction)",
				ErrNotDurable, n.addr, n.maxmemory, n.policy)
		}
	}
	s.warnForgetful(nodes)
	var weak *nodeConfig
	for i := range nodes {
		if nodes[i].appendonly != "yes" || nodes[i].appendfsync != "always" {
			weak = &nodes[i]
			break
		}
	}
	if weak == nil || !s.opt.RequireDurable {
		return nodes, s.unfit(nodes)
	}
	if !s.cluster && versionAtLeast(weak.version, 7, 2) && weak.appendonly != "no" {
		// WAITAOF waits for this connection's writes to be fsynced to the
		// local AOF; a cluster's pipeline spans nodes and connections, so
		// only a single node can use it.
		var local int64
		err := s.roundTrip(ctx, func(ctx context.Context) error {
			cmd := goredis.NewIntSliceCmd(ctx, "waitaof", 1, 0, s.opt.Timeout.Milliseconds())
			s.c.Process(ctx, cmd)
			r, err := cmd.Result()
			if err == nil && len(r) > 0 {
				local = r[0]
			}
			return err
		})
		if err == nil && local >= 1 {
			s.waitAOF = true
			return nodes, s.unfit(nodes)
		}
		return nil, fmt.Errorf("%w: %s (Redis %s) has appendonly=%s, appendfsync=%s, and WAITAOF 1 0 answered %d local fsyncs, %v",
			ErrNotDurable, weak.addr, weak.version, unknown(weak.appendonly), unknown(weak.appendfsync), local, err)
	}
	return nil, fmt.Errorf("%w: %s (Redis %s) has appendonly=%s, appendfsync=%s",
		ErrNotDurable, weak.addr, unknown(weak.version), unknown(weak.appendonly), unknown(weak.appendfsync))
}

// warnForgetful logs, without RequireDurable, that nodes may forget counts
// (eviction, no fsync before the reply): once at Open, and again for each
// new primary.
func (s *Store) warnForgetful(nodes []nodeConfig) {
	for _, n := range nodes {
		if s.opt.Replicas > 0 && n.replicas > s.opt.Replicas {
			// WAIT counts any N replicas, and a failover while the old
			// primary lives on (a pause, a manual failover) may promote
			// one that did not acknowledge: it lacks answered hits.
			commit.Log(s.opt.Logger).Warn("redis: Options.Replicas is below the primary's online replicas: a failover that promotes a replica which did not acknowledge a batch forgets its answered hits; set Replicas to every replica to keep them",
				"node", n.addr, "replicas", n.replicas, "Options.Replicas", s.opt.Replicas)
			break
		}
	}
	if s.opt.RequireDurable {
		return
	}
	for _, n := range nodes {
		if n.evicts() {
			commit.Log(s.opt.Logger).Warn("redis: the server may evict counters (a memory limit with an evicting policy): an evicted client gets a fresh allowance; set maxmemory-policy noeviction",
				"node", n.addr, "maxmemory", n.maxmemory, "maxmemory-policy", n.policy)
			break
		}
	}
	for _, n := range nodes {
		if s.opt.Durability == store.SurvivesProcessCrash && n.appendonly == "yes" {
			// Asked for: the server logs each count to its AOF before it
			// replies, and fsyncs per appendfsync (everysec: a crash of the
			// server or its machine loses about the last second of counts).
			continue
		}
		if n.appendonly != "yes" || n.appendfsync != "always" {
			commit.Log(s.opt.Logger).Warn("redis: counts are not durable before their reply (appendonly yes and appendfsync always are not both set): a Redis restart or failover may forget counts, giving clients a fresh allowance",
				"node", n.addr, "appendonly", unknown(n.appendonly), "appendfsync", unknown(n.appendfsync))
			return
		}
	}
}

func unknown(v string) string {
	if v == "" {
		return "unknown (CONFIG GET refused)"
	}
	return v
}

// infoField reads one "name:value" line of INFO's reply.
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// versionAtLeast reports whether a "major.minor.patch" version is at
// least major.minor.
func versionAtLeast(v string, major, minor int) bool {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || (ma == major && mi >= minor)
}

// Wall reads the wall clock.
func (s *Store) Wall() time.Time { return s.opt.Clock.Wall() }

// Health reports whether the store can count: the committer's last batch,
// when it ended within a second, else a probe write through it
// (a SET with a short expiry, in a batch of its own or with others' hits).
// An unreachable or refusing server is store.ErrUnhealthy.
func (s *Store) Health(ctx context.Context) error { return s.commit.Check(ctx) }

// Stats reports the committer's counters: a commit is one batch's
// pipeline.
func (s *Store) Stats() store.Stats { return s.commit.Stats() }

// Close sends every queued hit, then stops the policy heartbeats and
// gives up this instance's policy claims. It does not close the client,
// which the caller owns. If ctx ends first it returns ctx.Err() and leaves
// the flush running.
func (s *Store) Close(ctx context.Context) error {
	if err := s.commit.Close(ctx); err != nil {
		return err
	}
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.stopped
		s.releaseAll()
	})
	return nil
}
