// Command readmecheck fails when a Go program shown in the repository's
// Markdown is not a program that builds.
//
// A program is a fenced go block that declares package main. Each must be
// preceded by a comment naming the file it shows, and must be that file
// byte for byte:
//
//	<!-- file: examples/limit/main.go -->
//	```go
//	package main
//	…
//	```
//
// The files live under examples/, in packages of their own, which
// go vet ./... and go build ./... compile with the rest of the module;
// readmecheck then type-checks each named package with go vet, so that it
// fails on its own when one stops compiling. A fenced go block without
// package main is a fragment and is not checked.
//
// With no arguments it checks README.md, from the repository root;
// otherwise the files named. With -fix it rewrites each program in the
// Markdown from its file instead of failing on a difference.
//
//	go run ./internal/tools/readmecheck
//	go run ./internal/tools/readmecheck -fix
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

func main() {
	fix := flag.Bool("fix", false, "rewrite each program in the Markdown from its file")
	flag.Parse()
	docs := flag.Args()
	if len(docs) == 0 {
		docs = []string{"README.md"}
	}
	var problems []string
	pkgs := map[string]bool{}
	for _, name := range docs {
		md, err := os.ReadFile(name)
		if err != nil {
			fmt.Fprintf(os.Stderr, "readmecheck: %v\n", err)
			os.Exit(2)
		}
		progs, errs := programs(name, md)
		problems = append(problems, errs...)
		out, changed := md, false
		for i := len(progs) - 1; i >= 0; i-- { // from the end, so offsets hold
			p := progs[i]
			want, err := os.ReadFile(p.file)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s:%d: %v", name, p.line, err))
				continue
			}
			pkgs["./"+filepath.ToSlash(filepath.Dir(p.file))] = true
			if bytes.Equal(want, md[p.start:p.end]) {
				continue
			}
			if *fix {
				out = append(append(append([]byte(nil), out[:p.start]...), want...), out[p.end:]...)
				changed = true
				continue
			}
			problems = append(problems, fmt.Sprintf("%s:%d: the program differs from %s (go run ./internal/tools/readmecheck -fix copies the file in)", name, p.line, p.file))
		}
		if changed {
			if err := os.WriteFile(name, out, 0o644); err != nil {
				fmt.Fprintf(os.Stderr, "readmecheck: %v\n", err)
				os.Exit(2)
			}
			fmt.Printf("readmecheck: rewrote the programs in %s from their files\n", name)
		}
	}
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, p)
	}
	if len(problems) > 0 {
		fmt.Fprintf(os.Stderr, "readmecheck: %d problem(s)\n", len(problems))
		os.Exit(1)
	}
	if err := vet(pkgs); err != nil {
		fmt.Fprintf(os.Stderr, "readmecheck: a program does not build: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("readmecheck: %d program(s), each its file and each builds\n", len(pkgs))
}

// program is a fenced go block that declares package main: md[start:end]
// is its text, which must be file's.
type program struct {
	file       string
	line       int // the fence's, for messages
	start, end int
}

var (
	marker      = regexp.MustCompile(`^<!-- file: (\S+) -->\s*$`)
	packageMain = regexp.MustCompile(`(?m)^package main\s*$`)
)

// programs finds the programs in md, and names each block that declares
// package main without saying which file it is.
func programs(name string, md []byte) (progs []program, problems []string) {
	lines := bytes.SplitAfter(md, []byte("\n"))
	offset, file := 0, ""
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(string(lines[i]))
		offset += len(lines[i])
		if m := marker.FindStringSubmatch(line); m != nil {
			file = filepath.FromSlash(m[1])
			continue
		}
		if !strings.HasPrefix(line, "```") {
			if line != "" && file != "" {
				problems = append(problems, fmt.Sprintf("%s:%d: the file comment is not followed by a go block", name, i))
				file = ""
			}
			continue
		}
		// A fenced block: its text runs from offset to its closing fence.
		start, end, j := offset, offset, i+1
		for ; j < len(lines) && strings.TrimSpace(string(lines[j])) != "```"; j++ {
			end += len(lines[j])
		}
		if j < len(lines) {
			offset = end + len(lines[j])
		} else {
			offset = end
		}
		isProgram := line == "```go" && packageMain.Match(md[start:end])
		switch {
		case isProgram && file == "":
			problems = append(problems, fmt.Sprintf("%s:%d: a program without a <!-- file: examples/…/main.go --> line before it", name, i+1))
		case isProgram:
			progs = append(progs, program{file: file, line: i + 1, start: start, end: end})
		case file != "":
			problems = append(problems, fmt.Sprintf("%s:%d: the file comment is followed by a block that is not a go program", name, i))
		}
		file, i = "", j
	}
	return progs, problems
}

// vet type-checks pkgs, the packages the programs are in.
func vet(pkgs map[string]bool) error {
	if len(pkgs) == 0 {
		return nil
	}
	args := []string{"vet"}
	for p := range pkgs {
		args = append(args, p)
	}
	cmd := exec.Command("go", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return fmt.Errorf("go vet: %s", strings.TrimSpace(out.String()))
		}
		return err
	}
	return nil
}
