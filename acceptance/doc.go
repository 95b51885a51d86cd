// Package acceptance is porch's acceptance gate: it builds the storefront
// sample, starts real storefront processes on loopback, and checks the
// contracts of issues 2 (rate limiting), 3 (idempotency keys) and 4 (several
// instances on PostgreSQL) with real HTTP and by reading the tables the
// processes write: the SQLite file, or the PostgreSQL schema two instances
// share (internal/pgtest gives each leg a fresh one, on the server
// PORCH_TEST_POSTGRES names, else a local one on 127.0.0.1:5432, else a
// Docker container; PORCH_REQUIRE_POSTGRES=1 fails rather than skips those
// legs when there is none, and acceptance.sh's last line names the legs it
// skipped).
//
// Its tests carry the build tag "acceptance", so go test ./... does not run
// them. Run the gate from the repository root:
//
//	./acceptance.sh            # go test -tags acceptance -count=1 -v ./acceptance/
//	./acceptance.sh -run Rate  # extra arguments go to go test
//
// storefront_test.go holds the process helper and the shared HTTP and table
// readers, pgdb_test.go the PostgreSQL ones and pgproxy_test.go a relay the
// gate can cut to simulate connection loss; each other *_test.go is one area
// of the contract (rate, shop, idem, postgres, serve: issue 9's
// connection bounds, drain and 404/405/HEAD, and algorithm: issue 16's
// -rate-algorithm sliding and gcra, with pgalgorithm on PostgreSQL, and
// redis: issue 17's counters on Redis, one server or a cluster, with
// internal/redistest's server under PORCH_TEST_REDIS or PORCH_REQUIRE_REDIS,
// and lease: -rate-lease, two instances on PostgreSQL and on Redis, stopped
// by SIGTERM or kill -9, and pgfailover: two instances on a PostgreSQL
// primary and standby of the gate's own, pgcluster_test.go, whose primary
// is killed and whose standby is promoted; it needs the server's programs,
// initdb, postgres and pg_basebackup, on PATH or in
// /usr/lib/postgresql/N/bin, and runs them as the postgres user when the
// gate runs as root, and redisfailover: two instances on a Sentinel-managed
// primary with two replicas, or on a Cluster with a replica per primary,
// the primary holding a limited client's count killed, and one started
// while its replica is still in its first sync; and the chaos legs,
// chaos_test.go on SQLite and PostgreSQL, chaos_redis_test.go on Redis with
// Sentinel).
package acceptance
