package main

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestPrograms(t *testing.T) {
	const prog = "package main\n\nfunc main() {}\n"
	tests := []struct {
		name     string
		md       string
		files    []string // the programs found, in order
		problems int
	}{
		{"a program and its file", "text\n\n<!-- file: examples/a/main.go -->\n```go\n" + prog + "```\n", []string{"examples/a/main.go"}, 0},
		{"a fragment is not checked", "```go\nr.Use(k.Limit(1, time.Minute))\n```\n", nil, 0},
		{"a program without its file", "```go\n" + prog + "```\n", nil, 1},
		{"a file comment before prose", "<!-- file: examples/a/main.go -->\ntext\n```go\n" + prog + "```\n", nil, 2},
		{"a file comment before a fragment", "<!-- file: examples/a/main.go -->\n```go\nx := 1\n```\n", nil, 1},
		{"a shell block", "<!-- file: examples/a/main.go -->\n```sh\npackage main\n```\n", nil, 1},
		{"two programs", "<!-- file: a/main.go -->\n```go\n" + prog + "```\n\n<!-- file: b/main.go -->\n\n```go\n" + prog + "```\n", []string{"a/main.go", "b/main.go"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			progs, problems := programs("README.md", []byte(tt.md))
			var files []string
			for _, p := range progs {
				files = append(files, filepath.ToSlash(p.file))
				if got := tt.md[p.start:p.end]; got != prog {
					t.Errorf("program text: got %q, want %q", got, prog)
				}
			}
			if strings.Join(files, " ") != strings.Join(tt.files, " ") {
				t.Errorf("programs: got %v, want %v", files, tt.files)
			}
			if len(problems) != tt.problems {
				t.Errorf("problems: got %q, want %d", problems, tt.problems)
			}
		})
	}
}
