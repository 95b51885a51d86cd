package main

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestPgbenchLatencies checks that the pgbench rows' p50 and p99 are read
// from every thread's transaction log, skipping failed transactions,
// which log no latency.
func TestPgbenchLatencies(t *testing.T) {
	dir := t.TempDir()
	// client tx latency_us script epoch_s epoch_us, one file per thread.
	var a, b []byte
	for i := 1; i <= 50; i++ {
		a = append(a, []byte("0 "+itoa(i)+" "+itoa(i*10)+" 0 1764748800 100\n")...)
		b = append(b, []byte("1 "+itoa(i)+" "+itoa((50+i)*10)+" 0 1764748800 100\n")...)
	}
	b = append(b, []byte("1 51 failed 0 1764748800 100\n")...)
	if err := os.WriteFile(filepath.Join(dir, "tx.123"), a, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tx.123.1"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	lat, err := pgbenchLatencies(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(lat) != 100 {
		t.Fatalf("read %d latencies, want 100", len(lat))
	}
	if p50, p99 := percentile(lat, 0.50), percentile(lat, 0.99); p50 != 500*time.Microsecond || p99 != 990*time.Microsecond {
		t.Errorf("p50 %s, p99 %s; want 500µs and 990µs", p50, p99)
	}
}

// TestSearchPath checks that the schema pgschema.Fresh put on a DSN's
// search_path is found for PGOPTIONS, in URL and keyword form.
func TestSearchPath(t *testing.T) {
	for dsn, want := range map[string]string{
		"postgres://postgres@127.0.0.1:5432/test?search_path=porch_bench_ab12&sslmode=disable": "porch_bench_ab12",
		"host=127.0.0.1 dbname=test search_path=porch_bench_cd34":                              "porch_bench_cd34",
	} {
		if got, err := searchPath(dsn); err != nil || got != want {
			t.Errorf("searchPath(%q) = %q, %v; want %q", dsn, got, err, want)
		}
	}
	if _, err := searchPath("postgres://postgres@127.0.0.1/test"); err == nil {
		t.Error("searchPath of a DSN without one: no error")
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
