package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// postgresMigrations are applied in order under an advisory lock, so that
// several instances starting at once migrate exactly once; the
// porch_schema_version row records how many have run. Append, never edit.
// Tables and columns match SQLite's; times are Unix milliseconds on the
// database's clock.
var postgresMigrations = []string{
	`CREATE TABLE porch_rate_counters (
		key          text   NOT NULL PRIMARY KEY,
		window_start bigint NOT NULL,
		window_ms    bigint NOT NULL,
		count        bigint NOT NULL,
		expires_at   bigint NOT NULL
	);
	CREATE INDEX porch_rate_counters_expires_at ON porch_rate_counters (expires_at);
	CREATE TABLE porch_idem_responses (
		key          text    NOT NULL PRIMARY KEY,
		digest       bytea   NOT NULL,
		status       integer NOT NULL,
		content_type text    NOT NULL,
		body         bytea   NOT NULL,
		created_at   bigint  NOT NULL,
		expires_at   bigint  NOT NULL
	);
	CREATE INDEX porch_idem_responses_expires_at ON porch_idem_responses (expires_at);`,
	// One row per limiter name: the policy the running instances count
	// under, so that an instance with another one is refused (see
	// Store.ClaimPolicy). SQLite has no such table: one process writes
	// a file, and it checks its limiters in memory.
	`CREATE TABLE porch_rate_policies (
		name       text   NOT NULL PRIMARY KEY,
		quota      bigint NOT NULL,
		window_ms  bigint NOT NULL,
		updated_at bigint NOT NULL
	);`,
	// The response headers idem.Options.KeepHeaders keeps for replay,
	// encoded by store/internal/header: bytea, since a header value may
	// hold bytes a UTF-8 text column refuses. A constant default makes
	// this a catalog change, not a rewrite of the table; rows stored
	// before it have none.
	`ALTER TABLE porch_idem_responses ADD COLUMN headers bytea NOT NULL DEFAULT ''::bytea;`,
	// Keys are bytes (see dbKey): a text key refused invalid UTF-8 and
	// NUL, and one too long for the index failed the statement counting
	// a whole batch. The USING clause is dbKey in SQL, so that a stored
	// key longer than maxRawKey keeps its row under its new encoding.
	`ALTER TABLE porch_rate_counters ALTER COLUMN key TYPE bytea USING ` + pgDBKey + `;
	ALTER TABLE porch_idem_responses ALTER COLUMN key TYPE bytea USING ` + pgDBKey + `;`,
	// The policy's algorithm and GCRA's burst (driver.Policy), so that an
	// instance counting another algorithm under a name is refused as one
	// with another limit is; every policy stored before was "fixed". The
	// sliding window's previous count (driver.State.Prev) beside the count.
	`ALTER TABLE porch_rate_policies ADD COLUMN algorithm text NOT NULL DEFAULT 'fixed';
	ALTER TABLE porch_rate_policies ADD COLUMN burst bigint NOT NULL DEFAULT 0;
	ALTER TABLE porch_rate_counters ADD COLUMN prev bigint NOT NULL DEFAULT 0;
	ALTER TABLE porch_rate_counters ADD COLUMN interval_ns bigint NOT NULL DEFAULT 0;`,
	// What leases hold (driver.Lease): leased is the hits they counted
	// ahead and have neither settled nor given back, which a reset keeps
	// counted; lease_start is the first window start of the epochs
	// resets have replaced since a window last closed, the oldest a
	// give-back still applies to (see pgLeaseFrom). Constant defaults: a
	// catalog change, not a rewrite.
	`ALTER TABLE porch_rate_counters ADD COLUMN leased bigint NOT NULL DEFAULT 0;
	ALTER TABLE porch_rate_counters ADD COLUMN lease_start bigint NOT NULL DEFAULT 0;`,
	// The in-flight limiter's slots (driver.SharedSlots): one row per
	// request in flight, leased until expires_at (Unix ms on the
	// database's clock) and renewed by its holder. Logged, though a slot
	// is volatile: an unlogged table is empty on a standby that takes
	// over, which would forget every held slot and admit N more at once.
	`CREATE TABLE porch_inflight (
		key        bytea  NOT NULL,
		slot       text   NOT NULL,
		expires_at bigint NOT NULL,
		PRIMARY KEY (key, slot)
	);`,
}

// pgLeaseFrom is the oldest window start of row c whose leases' give-backs
// still apply: lease_start, or on a row from before the column (0) its own
// window's start.
const pgLeaseFrom = `(CASE WHEN c.lease_start > 0 THEN c.lease_start ELSE c.window_start END)`

// pgDBKey is dbKey of a text column key, for the migration to bytea keys.
const pgDBKey = `(CASE WHEN octet_length(convert_to(key, 'UTF8')) <= 256 THEN convert_to(key, 'UTF8')
	ELSE substring(convert_to(key, 'UTF8') FROM 1 FOR 224) || sha256(convert_to(key, 'UTF8')) || '\x01'::bytea END)`

// pgNowMS is the database's clock in Unix milliseconds. now() is the
// transaction's start, so every statement of one batch agrees on it; another
// instance's transaction that started later may have opened a window "after"
// it, which is why the time left is capped at the window.
const pgNowMS = `(extract(epoch FROM now()) * 1000)::bigint`

// pgRowNowMS is the clock a batch settles row c's hits at: pgNowMS, or
// the row's window start if that is later. A transaction that waited for
// the row's lock behind another instance's, started later, finds a window
// (or GCRA epoch) opened at that later clock; settled before its start,
// GCRA would owe an interval more and the sliding window weigh its
// previous count more than they do, and two instances would hand out one
// remaining count twice. Any true clock at the lock is at least the start
// of a window committed before it.
const pgRowNowMS = `greatest(` + pgNowMS + `, c.window_start)`

// pgClockMS is the database's clock now, not at the transaction's start:
// an idempotency owner's transaction spans its lock wait and its handler,
// and a TTL measured from its BEGIN could store a row already expired.
const pgClockMS = `(extract(epoch FROM clock_timestamp()) * 1000)::bigint`

const (
	pgLockSchema   = `SELECT pg_advisory_xact_lock(hashtextextended('porch_schema', 0))`
	pgVersionTable = `CREATE TABLE IF NOT EXISTS porch_schema_version (version integer NOT NULL)`
	pgReadVersion  = `SELECT coalesce(max(version), 0) FROM porch_schema_version`
	pgWriteVersion = `DELETE FROM porch_schema_version; INSERT INTO porch_schema_version (version) VALUES (%d)`
	// pgAddHits counts a batch. A window still open under another length
	// (the limiter's policy changed in a deploy) keeps its count and closes
	// at its old end or one new window from now, whichever is sooner, as
	// SQLite's load does; its row takes the new length.
	//
	// A lease's hits ($4, held) are held too until settled or given back;
	// a new window holds none before them (see pgLeaseFrom).
	pgAddHits = `INSERT INTO porch_rate_counters AS c (key, window_start, window_ms, count, expires_at, leased, lease_start)
		SELECT t.key, ` + pgNowMS + `, t.window_ms, t.hits, ` + pgNowMS + ` + t.window_ms, t.held, ` + pgNowMS + `
		FROM unnest($1::bytea[], $2::bigint[], $3::bigint[], $4::bigint[]) AS t (key, window_ms, hits, held)
		ON CONFLICT (key) DO UPDATE SET
			leased       = CASE WHEN c.expires_at <= excluded.window_start THEN excluded.leased ELSE c.leased + excluded.leased END,
			lease_start  = CASE WHEN c.expires_at <= excluded.window_start THEN excluded.lease_start ELSE c.lease_start END,
			window_start = CASE WHEN c.expires_at <= excluded.window_start THEN excluded.window_start
				WHEN c.window_ms = excluded.window_ms THEN c.window_start
				ELSE least(c.expires_at, excluded.expires_at) - excluded.window_ms END,
			window_ms    = excluded.window_ms,
			count        = CASE WHEN c.expires_at <= excluded.window_start THEN excluded.count ELSE c.count + excluded.count END,
			expires_at   = CASE WHEN c.expires_at <= excluded.window_start THEN excluded.expires_at
				WHEN c.window_ms = excluded.window_ms THEN c.expires_at
				ELSE least(c.expires_at, excluded.expires_at) END
		RETURNING c.key, c.count, c.prev, c.window_start, ` + pgRowNowMS
	// pgAddSlidingHits counts a batch of sliding-window hits: each key's
	// windows roll over to the batch's clock as driver.Rule.Advance rolls
	// them (one window on: the count becomes the previous count; two or
	// more: nothing is left), under the limiter's window, then the hits are
	// added. The rule decides from what it returns (see settle). Windows
	// follow each other from the key's first hit, so the next starts at
	// window_start + window_ms exactly: rate.New rounds every window up to
	// whole milliseconds.
	// A lease's hits are held as pgAddHits holds them; a window that rolls
	// over holds none before them.
	pgAddSlidingHits = `INSERT INTO porch_rate_counters AS c (key, window_start, window_ms, count, prev, expires_at, leased, lease_start)
		SELECT t.key, ` + pgNowMS + `, t.window_ms, t.hits, 0, ` + pgNowMS + ` + 2 * t.window_ms, t.held, ` + pgNowMS + `
		FROM unnest($1::bytea[], $2::bigint[], $3::bigint[], $4::bigint[]) AS t (key, window_ms, hits, held)
		ON CONFLICT (key) DO UPDATE SET
			leased = CASE WHEN ` + pgNowMS + ` - c.window_start < excluded.window_ms THEN c.leased ELSE 0 END + excluded.leased,
			lease_start = CASE WHEN ` + pgNowMS + ` - c.window_start < excluded.window_ms THEN c.lease_start
				WHEN ` + pgNowMS + ` - c.window_start < 2 * excluded.window_ms THEN c.window_start + excluded.window_ms
				ELSE ` + pgNowMS + ` END,
			window_start = CASE WHEN ` + pgNowMS + ` - c.window_start < excluded.window_ms THEN c.window_start
				WHEN ` + pgNowMS + ` - c.window_start < 2 * excluded.window_ms THEN c.window_start + excluded.window_ms
				ELSE ` + pgNowMS + ` END,
			prev = CASE WHEN ` + pgNowMS + ` - c.window_start < excluded.window_ms THEN c.prev
				WHEN ` + pgNowMS + ` - c.window_start < 2 * excluded.window_ms THEN c.count
				ELSE 0 END,
			count = CASE WHEN ` + pgNowMS + ` - c.window_start < excluded.window_ms THEN c.count ELSE 0 END + excluded.count,
			window_ms = excluded.window_ms,
			interval_ns = 0,
			expires_at = CASE WHEN ` + pgNowMS + ` - c.window_start < excluded.window_ms THEN c.window_start
				WHEN ` + pgNowMS + ` - c.window_start < 2 * excluded.window_ms THEN c.window_start + excluded.window_ms
				ELSE ` + pgNowMS + ` END + 2 * excluded.window_ms
		RETURNING c.key, c.count, c.prev, c.window_start, ` + pgRowNowMS
	// pgAddGCRAHits counts a batch of GCRA hits. A key's state is an epoch
	// start (ms) and the emission intervals counted since: its theoretical
	// arrival time is window_start ms + count × interval_ns. A bucket idle
	// at the batch's clock (TAT not after it) starts a new epoch there, as
	// driver.Rule.Advance does; then the hits are added. The rule decides
	// from what it returns (see settle). The TAT is compared in
	// nanoseconds, so an interval below the clock's millisecond counts
	// exactly; expires_at is the TAT rounded up to the millisecond.
	pgAddGCRAHits = `INSERT INTO porch_rate_counters AS c (key, window_start, window_ms, count, prev, interval_ns, expires_at)
		SELECT t.key, ` + pgNowMS + `, t.window_ms, t.hits, 0, t.interval_ns,
			(` + pgNowMS + ` * 1000000 + t.hits * t.interval_ns + 999999) / 1000000
		FROM unnest($1::bytea[], $2::bigint[], $3::bigint[], $4::bigint[]) AS t (key, window_ms, interval_ns, hits)
		ON CONFLICT (key) DO UPDATE SET
			window_start = CASE WHEN c.window_start * 1000000 + c.count * excluded.interval_ns <= ` + pgNowMS + ` * 1000000
				THEN ` + pgNowMS + ` ELSE c.window_start END,
			count = CASE WHEN c.window_start * 1000000 + c.count * excluded.interval_ns <= ` + pgNowMS + ` * 1000000
				THEN 0 ELSE c.count END + excluded.count,
			prev = 0,
			window_ms = excluded.window_ms,
			interval_ns = excluded.interval_ns,
			expires_at = (CASE WHEN c.window_start * 1000000 + c.count * excluded.interval_ns <= ` + pgNowMS + ` * 1000000
				THEN ` + pgNowMS + ` * 1000000 + excluded.count * excluded.interval_ns
				ELSE c.window_start * 1000000 + (c.count + excluded.count) * excluded.interval_ns END + 999999) / 1000000
		RETURNING c.key, c.count, c.prev, c.window_start, ` + pgRowNowMS
	// pgRefundHits takes the weights of refused hits back out of counts
	// pgAddHits added them to, and their lease's hits (unheld) out of what
	// it held, in the same transaction, which still holds the rows' locks.
	// It also settles the leases' answered hits the batch's hits report
	// (driver.Lease.Settled), if their epoch is one a give-back still
	// applies to, and holds their adopted ones if it is the row's own:
	// the add statement has rolled the window over first, so a closed
	// one's changes nothing.
	pgRefundHits = `UPDATE porch_rate_counters AS c SET count = c.count - t.refused,
			leased = greatest(c.leased - t.unheld
				- CASE WHEN t.lease_start BETWEEN ` + pgLeaseFrom + ` AND c.window_start THEN t.settled ELSE 0 END, 0)
				+ CASE WHEN t.lease_start = c.window_start THEN t.adopted ELSE 0 END
		FROM unnest($1::bytea[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[])
			AS t (key, refused, unheld, settled, adopted, lease_start)
		WHERE c.key = t.key`
	// pgTakeBack gives back hits of requests refused after all (lease
	// false: one (key, window_start) per row, weights summed), only from
	// the window they were counted in and never below zero, and a lease's
	// unanswered hits (lease true, n) with its answered ones (settled),
	// out of what it held too, from the window they were counted in or
	// one a reset has started since (see pgLeaseFrom). The rows are locked
	// in key order first, as pgAddHits locks them, so that two instances'
	// transactions cannot wait on each other in a cycle.
	pgTakeBack = `WITH t AS (
			SELECT * FROM unnest($1::bytea[], $2::bigint[], $3::bigint[], $4::boolean[], $5::bigint[])
				AS t (key, window_start, n, lease, settled)),
		locked AS (
			SELECT c.key, c.window_start, ` + pgLeaseFrom + ` AS lease_from FROM porch_rate_counters AS c
			WHERE c.key IN (SELECT key FROM t) AND c.expires_at > ` + pgNowMS + `
			ORDER BY c.key FOR UPDATE OF c),
		g AS (
			SELECT t.key, sum(t.n)::bigint AS n, sum(CASE WHEN t.lease THEN t.n + t.settled ELSE 0 END)::bigint AS unheld
			FROM t JOIN locked USING (key)
			WHERE CASE WHEN t.lease THEN t.window_start BETWEEN locked.lease_from AND locked.window_start
				ELSE t.window_start = locked.window_start END
			GROUP BY t.key)
		UPDATE porch_rate_counters AS c SET count = greatest(c.count - g.n, 0), leased = greatest(c.leased - g.unheld, 0)
		FROM g WHERE c.key = g.key`
	// The prunes run after the batch's upserts and skip locked rows, so they
	// never wait on another instance's transaction: no deadlock cycle can
	// pass through them. ORDER BY expires_at makes the planner walk the
	// expires_at index even before the table has statistics; without it a
	// fresh table is scanned whole on every commit.
	pgPruneCounters = `DELETE FROM porch_rate_counters WHERE key IN (
		SELECT key FROM porch_rate_counters WHERE expires_at <= ` + pgNowMS + `
		ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)`
	pgPruneResponses = `DELETE FROM porch_idem_responses WHERE key IN (
		SELECT key FROM porch_idem_responses WHERE expires_at <= ` + pgNowMS + `
		ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)`
	// The key's lock is transaction-scoped: it ends with the owner's
	// transaction, committed, rolled back or lost with its connection.
	// The lock id is a hash of the key's dbKey in hex: hashtextextended
	// takes text, which a key's bytes may not be.
	pgLockKey = `SELECT pg_advisory_xact_lock(hashtextextended(encode($1::bytea, 'hex'), 0))`
	// pgTryLockKey is pgLockKey without the wait: false while an owner
	// holds the key.
	pgTryLockKey     = `SELECT pg_try_advisory_xact_lock(hashtextextended(encode($1::bytea, 'hex'), 0))`
	pgForgetResponse = `DELETE FROM porch_idem_responses WHERE key = $1`
	// pgSetLockTimeout bounds the lock waits of the rest of the
	// transaction (Reserve's: see lockKey); pgResetLockTimeout gives
	// them back the session's bound.
	pgSetLockTimeout   = `SELECT set_config('lock_timeout', $1, true)`
	pgResetLockTimeout = `RESET lock_timeout`
	// Load prunes the key's row if it has expired and returns it otherwise,
	// in one round trip.
	// The clock is read once, so that a row is either pruned or returned:
	// read twice, a row expiring between the readings was neither. The
	// prune is part of the owner's transaction: an owner that then saves
	// replaces the row, one that gives the key up leaves it to the
	// bounded prune.
	pgLoadResponse = `WITH clock AS (SELECT ` + pgClockMS + ` AS now_ms),
		pruned AS (
			DELETE FROM porch_idem_responses WHERE key = $1 AND expires_at <= (SELECT now_ms FROM clock))
		SELECT digest, status, content_type, body, created_at, expires_at, headers
		FROM porch_idem_responses WHERE key = $1 AND expires_at > (SELECT now_ms FROM clock)`
	pgSaveResponse = `INSERT INTO porch_idem_responses AS r
			(key, digest, status, content_type, body, created_at, expires_at, headers)
		VALUES ($1, $2, $3, $4, $5, ` + pgClockMS + `, ` + pgClockMS + ` + $6, $7)
		ON CONFLICT (key) DO UPDATE SET
			digest = excluded.digest, status = excluded.status, content_type = excluded.content_type,
			body = excluded.body, headers = excluded.headers, created_at = excluded.created_at, expires_at = excluded.expires_at`
)

// pgAddFittingHits is pgAddHits for a batch whose every key's hits fit
// its limit ($5) from an empty window: a key whose window, as the
// upsert advances it, has room for all of them counts them all;
// another keeps its row as it is (locked, not updated) and is not
// returned. A new key, or one whose window closed, always fits.
var pgAddFittingHits = pgAddHits[:strings.Index(pgAddHits, "\t\tRETURNING")] + `		WHERE CASE WHEN c.expires_at <= excluded.window_start THEN 0 ELSE c.count END + excluded.count
		<= ($5::bigint[])[array_position($1::bytea[], excluded.key)]
	RETURNING c.key, c.count, c.prev, c.window_start, ` + pgRowNowMS

// pgAddFittingAlone is pgAddFittingHits as a transaction of its own, for
// a batch that carries nothing else: one autocommit statement instead of
// BEGIN, the upsert and COMMIT (and at SurvivesProcessCrash SET LOCAL),
// which is most of what a lone request's verdict costs the server. It
// writes nothing, and returns no key (each is then left over, as one that
// does not fit, for countHits' transaction), unless the session's
// isolation is READ COMMITTED, which BEGIN would otherwise have set: a
// server or role default of REPEATABLE READ would fail the upsert of a
// row another instance changed.
var pgAddFittingAlone = strings.Replace(pgAddFittingHits, pgAddSource,
	pgAddSource+"\t\tWHERE (SELECT current_setting('transaction_isolation')) = 'read committed'\n", 1)

// pgAddFittingAloneAsync is pgAddFittingAlone at SurvivesProcessCrash:
// set_config's local setting, unlike SET LOCAL, holds in the statement's
// own transaction, and PostgreSQL reads synchronous_commit for the commit
// before it ends the transaction's settings. Nothing outlives the
// statement, so a connection a pooler passes on to another client
// (PgBouncer in transaction mode) keeps its own level.
var pgAddFittingAloneAsync = strings.Replace(pgAddFittingAlone, "\t\tWHERE ",
	"\t\tWHERE (SELECT set_config('synchronous_commit', 'off', true)) = 'off' AND ", 1)

// pgAddSource is the unnest the add statements count from.
const pgAddSource = "AS t (key, window_ms, hits, held)\n"

func (p *Store) migrate(ctx context.Context) error {
	return pgx.BeginTxFunc(ctx, p.writer, readCommitted, func(tx pgx.Tx) error {
		// A DSN's statement_timeout or lock_timeout is for the
		// application's queries: an instance starting beside others that
		// migrate must wait its turn for the schema lock (bounded by ctx),
		// not fail to open.
		if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = 0`); err != nil {
			return fmt.Errorf("postgres: migrate: %w", err)
		}
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = 0`); err != nil {
			return fmt.Errorf("postgres: migrate: %w", err)
		}
		if _, err := tx.Exec(ctx, pgLockSchema); err != nil {
			return fmt.Errorf("postgres: lock schema: %w", err)
		}
		if _, err := tx.Exec(ctx, pgVersionTable); err != nil {
			return fmt.Errorf("postgres: schema version table: %w", err)
		}
		var version int
		if err := tx.QueryRow(ctx, pgReadVersion).Scan(&version); err != nil {
			return fmt.Errorf("postgres: read schema version: %w", err)
		}
		if version > len(postgresMigrations) {
			return fmt.Errorf("postgres: schema version %d is newer than this build knows (%d)", version, len(postgresMigrations))
		}
		if version == len(postgresMigrations) {
			// Nothing written, so the COMMIT waits for no synchronous
			// standby: an instance restarted while one is down opens, and
			// at SurvivesProcessCrash counts (see TestOpenWithNothingToChangeCommitsNothing).
			return nil
		}
		for v := version; v < len(postgresMigrations); v++ {
			if _, err := tx.Exec(ctx, postgresMigrations[v]); err != nil {
				return fmt.Errorf("postgres: migrate to %d: %w", v+1, err)
			}
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(pgWriteVersion, len(postgresMigrations))); err != nil {
			return fmt.Errorf("postgres: write schema version: %w", err)
		}
		return nil
	})
}
