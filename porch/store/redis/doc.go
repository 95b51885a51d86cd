// Package redis is a rate-limit store on Redis: a single server, a
// Sentinel-managed primary, or a Redis Cluster, shared by every instance
// that opens it (driver.SharedCounters).
//
// Each hit is decided by one Lua script per algorithm (fixed, sliding,
// GCRA), atomically for its key: the script reads the key's state,
// advances it to the server's clock (TIME) exactly as the limiter's
// driver.Rule would, counts the hit's weight only if it fits the rule's
// Room, and sets the key's expiry where the rule lets the state go. Hits
// are batched by porch's group committer, one pipeline of EVALSHA calls per
// batch, each key's hits in arrival order. A batch whose round trip fails
// or outlasts Options.Timeout fails closed: its requests are answered 503.
//
// A count is durable before its reply only on a server with appendonly yes
// and appendfsync always, or, on Redis 7.2 or later, with WAITAOF (see
// Open and Options.RequireDurable). Otherwise a restart may forget counts:
// clients get a fresh allowance.
//
// # Sentinel, replicas and failover
//
// For a Sentinel-managed primary, pass go-redis's failover client
// (redis.NewFailoverClient, or NewUniversalClient with MasterName); set
// its ContextTimeoutEnabled as for any client. It asks the Sentinels for
// the primary and drops its connections when they announce another
// (+switch-master); the store loads its scripts on the new primary when
// it first answers NOSCRIPT, and sends the batch again, which cannot count
// twice: the scripts had not run. While no primary answers, hits fail
// closed; the same store counts again on the new one, without a restart.
//
// Replication is asynchronous: a hit the primary counted and answered may
// not have reached the replica promoted in its place, and its client then
// gets a fresh allowance. With Options.Replicas N, every batch ends with
// WAIT N on its connection (on a cluster, each node's share waits for that
// node's replicas), and its hits are answered only once N replicas hold
// them; otherwise, within Options.Timeout, the batch fails closed (503,
// counted in Stats.Failed, logged, and Health says why). A hit answered
// allowed then survives the loss of the primary: replication is one
// stream, so the replica furthest along it holds every batch any replica
// acknowledged, and Sentinel promotes that one (among those it reaches,
// of equal replica-priority), as a Cluster's election favours it. N=1 is
// enough for that; a larger N keeps the hit if that replica is lost too.
// A failed batch may still have counted on the primary, which only ever
// counts high.
//
// RequireDurable and Replicas hold for whichever server is primary, not
// only the one Open checked: with either set, the store judges the primary
// again before a batch after a failed one, before and after a batch during
// which the client dialled a new connection (how a failover client reaches
// a new primary), and every second. A primary that does not meet them (a
// replica promoted without appendfsync always, or with fewer replicas
// online than Replicas) fails every batch closed, saying why in the hits'
// errors, in Health and in the log, until it does. Open adds a hook to a
// non-cluster client (AddHook) to notice its new connections; on a
// cluster, a failover fails the batches in flight, and the next one judges
// every master first. Open itself refuses a primary that would forget
// counts under RequireDurable, but not one whose replicas are not online
// yet (still in their first sync when everything starts together): it
// opens failing closed, as after a failover, and counts once they are.
//
// What WAIT does not do: a replica holds the batch in memory, not on disk;
// a failover that loses the primary and every acknowledging replica at
// once forgets it. During a Sentinel split (a primary cut off from the
// Sentinels but not from the clients), WAIT fails the old primary's
// batches once its replicas follow the new one, so its answers stop.
// Costs, in one run on two shared cores (BenchmarkReplicaAck): about a
// quarter of the requests per second with 64 concurrent callers, whose
// batches wait once each, and half with one caller, whose every request
// waits for a round trip to the replica.
//
// What a cluster cannot make atomic: keys are spread over hash slots, and
// a script touches one key. Every limiter's key for one principal shares a
// slot (see the hash tag in counterKey), but a rate.All's members still
// count one after another, and a request another member refuses has its
// hits given back (TakeBack), as on the SQL stores.
//
// Idempotency keys never live in Redis: *Store does not implement
// driver.KeyStore, so idem.New(redisStore) does not compile. An idempotent
// handler's writes must commit together with its stored response, and
// Redis cannot commit the application's database writes; a response kept
// beside them could be lost (or kept) apart from the side effect it
// records, and a retry would then run the handler twice.
package redis
