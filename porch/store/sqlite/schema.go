//go:build cgo

package sqlite

// sqliteMigrations are applied in order; PRAGMA user_version records how many
// have run, so opening an older file upgrades it and opening a current one
// does nothing. Append, never edit.
//
// Both tables are WITHOUT ROWID: every lookup is by the text key, so the key
// is the B-tree and no second index is kept for it. Times are Unix
// milliseconds on the store's timeline; expires_at is indexed for the bounded
// prune.
var sqliteMigrations = []string{
	`CREATE TABLE porch_rate_counters (
		key          TEXT    NOT NULL PRIMARY KEY,
		window_start INTEGER NOT NULL,
		window_ms    INTEGER NOT NULL,
		count        INTEGER NOT NULL,
		expires_at   INTEGER NOT NULL
	) WITHOUT ROWID;
	CREATE INDEX porch_rate_counters_expires_at ON porch_rate_counters (expires_at);
	CREATE TABLE porch_idem_responses (
		key          TEXT    NOT NULL PRIMARY KEY,
		digest       BLOB    NOT NULL,
		status       INTEGER NOT NULL,
		content_type TEXT    NOT NULL,
		body         BLOB    NOT NULL,
		created_at   INTEGER NOT NULL,
		expires_at   INTEGER NOT NULL
	) WITHOUT ROWID;
	CREATE INDEX porch_idem_responses_expires_at ON porch_idem_responses (expires_at);`,
	// The hit journal (see journal.go): a rowid table, appended to at its
	// right edge and never indexed by key. porch_rate_current is every
	// key's newest durable bound, wherever it lives.
	`CREATE TABLE porch_rate_journal (
		seq          INTEGER PRIMARY KEY,
		key          TEXT    NOT NULL,
		window_start INTEGER NOT NULL,
		window_ms    INTEGER NOT NULL,
		count        INTEGER NOT NULL,
		expires_at   INTEGER NOT NULL
	);
	CREATE VIEW porch_rate_current AS
		SELECT key, window_start, window_ms, count, expires_at FROM
			(SELECT key, window_start, window_ms, count, expires_at, max(seq) FROM porch_rate_journal GROUP BY key)
		UNION ALL
		SELECT key, window_start, window_ms, count, expires_at FROM porch_rate_counters c
			WHERE NOT EXISTS (SELECT 1 FROM porch_rate_journal j WHERE j.key = c.key);`,
	// The response headers idem.Options.KeepHeaders keeps for replay,
	// encoded by store/internal/header. Rows stored before it have none.
	`ALTER TABLE porch_idem_responses ADD COLUMN headers BLOB NOT NULL DEFAULT x'';`,
	// The sliding window's previous count (driver.State.Prev); 0 for the
	// other algorithms and every row written before them. expires_at is
	// now the rule's (driver.Rule.Expires), no longer always the window's
	// close.
	`ALTER TABLE porch_rate_counters ADD COLUMN prev INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE porch_rate_journal ADD COLUMN prev INTEGER NOT NULL DEFAULT 0;
	DROP VIEW porch_rate_current;
	CREATE VIEW porch_rate_current AS
		SELECT key, window_start, window_ms, count, prev, expires_at FROM
			(SELECT key, window_start, window_ms, count, prev, expires_at, max(seq) FROM porch_rate_journal GROUP BY key)
		UNION ALL
		SELECT key, window_start, window_ms, count, prev, expires_at FROM porch_rate_counters c
			WHERE NOT EXISTS (SELECT 1 FROM porch_rate_journal j WHERE j.key = c.key);`,
}

const (
	sqlUpsertResponse = `INSERT INTO porch_idem_responses (key, digest, status, content_type, body, created_at, expires_at, headers)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET
			digest       = excluded.digest,
			status       = excluded.status,
			content_type = excluded.content_type,
			body         = excluded.body,
			headers      = excluded.headers,
			created_at   = excluded.created_at,
			expires_at   = excluded.expires_at`
	sqlDeleteExpiredResponse = `DELETE FROM porch_idem_responses WHERE key = ? AND expires_at <= ?`
	// sqlResponsesDue is the earliest expiry of a stored response, or $1
	// when there is none; the expires_at index answers it.
	sqlResponsesDue   = `SELECT coalesce(min(expires_at), ?) FROM porch_idem_responses`
	sqlPruneResponses = `DELETE FROM porch_idem_responses WHERE key IN
		(SELECT key FROM porch_idem_responses WHERE expires_at <= ? LIMIT ?)`
	sqlLoadCounters = `SELECT key, window_start, window_ms, count, prev, expires_at FROM porch_rate_current WHERE expires_at > ?`
	sqlLoadResponse = `SELECT digest, status, content_type, body, created_at, expires_at, headers
		FROM porch_idem_responses WHERE key = ?`
	sqlNewest = `SELECT max(
		coalesce((SELECT max(window_start) FROM porch_rate_counters), 0),
		coalesce((SELECT max(window_start) FROM porch_rate_journal), 0),
		coalesce((SELECT max(created_at) FROM porch_idem_responses), 0))`
)
