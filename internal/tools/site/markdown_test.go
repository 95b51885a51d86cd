package main

import "testing"

func TestGitHubIDs(t *testing.T) {
	ids := newGitHubIDs()
	tests := []struct{ heading, want string }{
		{"Exactly once: the handler's writes", "exactly-once-the-handlers-writes"},
		{"Sustained load, many keys, SQLite", "sustained-load-many-keys-sqlite"},
		{"`idem.Exec` and `snake_case`", "idemexec-and-snake_case"},
		{"The pool", "the-pool"},
		{"The pool", "the-pool-1"},
		{"—", "section"},
	}
	for _, tc := range tests {
		if got := string(ids.Generate([]byte(tc.heading), 0)); got != tc.want {
			t.Errorf("Generate(%q): got %q, want %q", tc.heading, got, tc.want)
		}
	}
}

func TestRewrite(t *testing.T) {
	s := &site{
		pages:  []page{{src: "README.md", out: "index.html"}, {src: "docs/design.md", out: "design.html"}},
		assets: []string{"docs/perf-reqs.svg"},
	}
	tests := []struct{ from, dest, want string }{
		{"README.md", "docs/design.md#the-pool", "design.html#the-pool"},
		{"docs/design.md", "../README.md", "index.html"},
		{"docs/design.md", "#group-commit", "#group-commit"},
		{"docs/design.md", "perf-reqs.svg", "perf-reqs.svg"},
		{"README.md", "docs/perf-reqs.svg", "perf-reqs.svg"},
		{"docs/design.md", "../bench/cmd/bench/main.go", repoURL + "bench/cmd/bench/main.go"},
		{"README.md", "/go.mod", repoURL + "go.mod"},
		{"README.md", "https://github.com/go-chi/chi", "https://github.com/go-chi/chi"},
		{"README.md", "mailto:a@b.c", "mailto:a@b.c"},
	}
	for _, tc := range tests {
		if got := s.rewrite(tc.from, tc.dest); got != tc.want {
			t.Errorf("rewrite(%q, %q): got %q, want %q", tc.from, tc.dest, got, tc.want)
		}
	}
}
