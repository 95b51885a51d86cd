package sqlite

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/mattn/go-sqlite3"
)

// BenchmarkAppStatementOneStep times statements that SQLite runs in one
// uninterruptible stretch of its program (no loop, so no point where it
// looks for the budget's interrupt), on a connection held to appLimits as
// the writer is while an application's statement runs. Each iteration is
// one such stretch: what the batch around it waits, whatever the budget.
// The "terms" cases grow with the statement's length: each term of them
// builds or scans one 1 MiB value, and a statement may be maxAppSQL long.
func BenchmarkAppStatementOneStep(b *testing.B) {
	mib := strings.Repeat("a", maxAppValue-16)
	for _, c := range []struct {
		name string
		q    string
		args []any
	}{
		{"instr 64KiB needle in 1MiB", `SELECT instr(?1, ?2 || 'b')`, []any{mib, mib[:64<<10]}},
		{"trim 16KiB by 16KiB", `SELECT length(trim(replace(?1, 'a', 'b'), ?1 || 'b'))`, []any{mib[:16<<10]}},
		{"replace 64KiB pattern in 1MiB", `SELECT length(replace(?1, ?2 || 'b', ''))`, []any{mib, mib[:64<<10]}},
		{"LIKE 50-byte pattern on 1MiB", `SELECT ?1 LIKE '%a_a_a_a_a_a_a_a_a_a_a_a_a_a_a_a_a_a_a_a_a_a_a_a_b'`, []any{mib}},
		{"upper terms 2KiB statement", oneRow("length(upper(?1 || 1))", 2<<10), []any{mib}},
		{"upper terms 8KiB statement", oneRow("length(upper(?1 || 1))", 8<<10), []any{mib}},
		{"concat terms 8KiB statement", oneRow("length(?1 || ?1)", 8<<10), []any{mib[:512<<10]}},
		{"randomblob terms 8KiB statement", oneRow("length(randomblob(1048000))", 8<<10), nil},
	} {
		b.Run(c.name, func(b *testing.B) {
			conn := appLimitedConn(b)
			for b.Loop() {
				rows, err := conn.QueryContext(context.Background(), c.q, c.args...)
				if err != nil {
					b.Fatal(err)
				}
				for rows.Next() {
				}
				if err := rows.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// oneRow returns a SELECT of terms summed up to about n bytes of text, in
// columns of at most 500 terms so as to stay within SQLite's expression
// depth.
func oneRow(term string, n int) string {
	var q strings.Builder
	q.WriteString("SELECT ")
	for i := 0; q.Len()+len(term)+2 < n; i++ {
		switch {
		case i%500 == 0 && i > 0:
			q.WriteString(", ")
		case i > 0:
			q.WriteString("+")
		}
		q.WriteString(term)
	}
	return q.String()
}

// appLimitedConn opens an in-memory database whose one connection is held
// to appLimits.
func appLimitedConn(b *testing.B) *sql.Conn {
	b.Helper()
	db, err := sql.Open("sqlite3", ":memory:")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	conn, err := db.Conn(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	err = conn.Raw(func(dc any) error {
		c := dc.(*sqlite3.SQLiteConn)
		for _, l := range appLimits {
			c.SetLimit(l.id, l.value)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return conn
}
