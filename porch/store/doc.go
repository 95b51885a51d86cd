// Package store owns every SQL statement porch runs and the committer that
// makes them durable.
//
// A [Store] keeps two purpose-shaped tables: porch_rate_counters (one integer
// counter per client key and window) and porch_idem_responses (a stored
// status, content type and body beside the digest of the request that
// produced it). SQLite adds a hit journal, porch_rate_journal, that counter
// writes append to while it runs (see journal.go); Close folds it into
// porch_rate_counters. Expiry is lazy: a row is reset or pruned when its key is next
// touched, and a bounded number of expired rows is pruned with every commit,
// so clients that never return do not grow a table without bound. There is no
// background sweeper.
//
// Writes go through group commit: one committer goroutine drains every
// pending write into one transaction, and each write's callback runs only
// after that transaction has committed (synchronous=FULL for SQLite), so one
// fsync serves a whole batch and nothing is visible before it is durable.
// Store.Health reports whether commits succeed: from the last batch, or from
// one shared probe write when the store is idle, so a health endpoint can
// poll it without queueing a write per call.
//
//	s, err := store.OpenSQLite("app.db", store.Options{})
//	if err != nil { ... }
//	defer s.Close(context.Background())
package store
