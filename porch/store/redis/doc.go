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
// Open and Options.RequireDurable). Otherwise a restart or failover may
// forget counts: clients get a fresh allowance.
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
