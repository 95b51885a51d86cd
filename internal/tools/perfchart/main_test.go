package main

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	in := strings.Join([]string{
		"**Measured on 2026-11-30 at commit `068ee3d751b4`**, on two cores.",
		"",
		"| row | what the server runs |",
		"| --- | --- |",
		"| no limiter | chi |",
		"",
		"| row | client keys | req/s (runs' range) | p50 | p99 | × httprate | writes/commit | req/commit | errors |",
		"| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
		"| no limiter | one | 62,419 (62,270–66,056) | 0.85 ms | 7.92 ms | 1.06 | — | — | 0 |",
		"| porch Limiter, SQLite | many | failed: exit status 1 | | | | | | |",
		"| porch Limiter, SQLite | one | 41,729 (37,760–45,595) | 1.33 ms | 7.39 ms | 0.71 | 1.0 | 136.6 | 0 |",
		"",
		"| row | client keys | req/s (runs' range) | p50 | p99 |",
		"| later | one | 1 (1–1) | 1.00 ms | 1.00 ms |",
	}, "\n")
	got, err := parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if got.measured != "commit 068ee3d751b4, 2026-11-30" {
		t.Errorf("measured: got %q", got.measured)
	}
	want := []row{
		{label: "no limiter", keys: "one", rps: 62419, min: 62270, max: 66056, p50: 0.85, p99: 7.92},
		{label: "porch Limiter, SQLite", keys: "one", rps: 41729, min: 37760, max: 45595, p50: 1.33, p99: 7.39},
	}
	if len(got.rows) != len(want) {
		t.Fatalf("got %d rows %+v, want %d (the failed row and the second table left out)", len(got.rows), got.rows, len(want))
	}
	for i := range want {
		if got.rows[i] != want[i] {
			t.Errorf("row %d: got %+v, want %+v", i, got.rows[i], want[i])
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"no table", "# Performance\n\nnothing measured\n", "no throughput table"},
		{"bad req/s", "| row | client keys | req/s |\n| --- |\n| x | one | fast | 1 ms | 2 ms |\n", "is not \"N (MIN–MAX)\""},
		{"bad unit", "| row | client keys | req/s |\n| x | one | 1 (1–1) | 1 min | 2 ms |\n", "unit \"min\""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
