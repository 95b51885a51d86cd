package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/writeonce/porch-go/internal/pgtest"
	"github.com/writeonce/porch-go/porch/internal/algorithm"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/internal/commit"
)

// recordSynchronousCommit makes every write to porch's counters and
// stored responses record, from inside its own transaction, the
// synchronous_commit it will commit with, and returns a reader of the
// levels recorded since the last read and the server's own level.
func recordSynchronousCommit(t *testing.T, p *Store) (seen func() []string, serverLevel string) {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{
		`CREATE TABLE sync_seen (id bigserial PRIMARY KEY, level text NOT NULL)`,
		`CREATE FUNCTION record_sync() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO sync_seen (level) VALUES (current_setting('synchronous_commit'));
			RETURN NULL;
		END $$`,
		`CREATE TRIGGER record_sync AFTER INSERT OR UPDATE ON porch_rate_counters FOR EACH STATEMENT EXECUTE FUNCTION record_sync()`,
		`CREATE TRIGGER record_sync AFTER INSERT OR UPDATE ON porch_idem_responses FOR EACH STATEMENT EXECUTE FUNCTION record_sync()`,
	} {
		if _, err := p.pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := p.pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&serverLevel); err != nil {
		t.Fatal(err)
	}
	seen = func() []string {
		rows, err := p.pool.Query(ctx, `DELETE FROM sync_seen RETURNING level`)
		if err != nil {
			t.Fatal(err)
		}
		levels, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return levels
	}
	return seen, serverLevel
}

// TestDurabilityOfTransactions checks that under SurvivesProcessCrash the
// committer's transactions of hits commit with synchronous_commit off,
// both the one-round-trip path (fixed windows that fit) and the general
// one, with the committer's probe, take-backs and resets, and that
// Health's own probe, an owner's stored response, and every transaction
// under the default keep the server's level.
func TestDurabilityOfTransactions(t *testing.T) {
	dsn := pgtest.DSN(t)
	p := openInternal(t, dsn, Options{Options: store.Options{Durability: store.SurvivesProcessCrash}})
	seen, server := recordSynchronousCommit(t, p)
	if server == "off" {
		t.Skip("the server's synchronous_commit is off already")
	}
	hit := func(key string, rule driver.Rule) commit.Op {
		return commit.Op{Hit: &commit.Hit{Key: key, Rule: rule, N: 1}}
	}
	fixedRule := algorithm.MustRule(algorithm.Fixed, 10, time.Hour, 0)
	slidingRule := algorithm.MustRule(algorithm.Sliding, 10, time.Hour, 0)
	// The prunes are due at a store's first batch and would put it in a
	// transaction; claimed here, the first step's fitting hits are one
	// autocommit statement (see pgAddFittingAlone).
	p.prunes.claim(time.Now())
	steps := []struct {
		name  string
		batch []commit.Op
		want  string
	}{
		{"fixed hits that fit, alone", []commit.Op{hit("a", fixedRule), hit("b", fixedRule)}, "off"},
		{"sliding hits", []commit.Op{hit("c", slidingRule)}, "off"},
		// The committer's probe at the hits' level: at the server's, it
		// would wait for a synchronous standby, and its batch's hits
		// with it (Health's own probe checks the server's level).
		{"hits with the committer's probe", []commit.Op{hit("a", fixedRule), {Probe: true}}, "off"},
		{"a take-back", []commit.Op{{TakeBack: &commit.TakeBack{Key: "a", N: 1}}}, "off"},
		{"a reset", []commit.Op{{Reset: &commit.Reset{Key: "a"}}}, "off"},
	}
	for _, st := range steps {
		if err := p.writeBatch(st.batch); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := seen(); !allAre(got, st.want) {
			t.Errorf("%s: committed with synchronous_commit %v, want %s", st.name, got, st.want)
		}
	}

	ctx := context.Background()
	if err := p.durable.probe(ctx); err != nil {
		t.Fatal(err)
	}
	if got := seen(); !allAre(got, server) {
		t.Errorf("Health's own probe: committed with synchronous_commit %v, want %s", got, server)
	}

	r, err := p.Reserve(ctx, "idem")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Save(ctx, driver.Response{Digest: []byte{1}, Status: 201, Body: []byte("ok")}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := seen(); !allAre(got, server) {
		t.Errorf("an owner's stored response: committed with synchronous_commit %v, want %s", got, server)
	}

	d := openInternal(t, dsn, Options{})
	d.prunes.claim(time.Now())
	if err := d.writeBatch([]commit.Op{hit("d", fixedRule)}); err != nil {
		t.Fatal(err)
	}
	if got := seen(); !allAre(got, server) {
		t.Errorf("SurvivesPowerLoss, fixed hits: committed with synchronous_commit %v, want %s", got, server)
	}
}

func TestOpenRefusesUnknownDurability(t *testing.T) {
	p, err := Open(context.Background(), pgtest.DSN(t), Options{Options: store.Options{Durability: store.SurvivesProcessCrash + 1}})
	if err == nil {
		p.Close(context.Background())
		t.Fatal("Open accepted a Durability that names no level")
	}
}

// allAre reports whether levels has at least one level and every one is
// want.
func allAre(levels []string, want string) bool {
	for _, l := range levels {
		if l != want {
			return false
		}
	}
	return len(levels) > 0
}
