// Command linkcheck fails when a relative link in the repository's Markdown
// does not resolve to a file or directory.
//
// With no arguments it checks README.md and docs/*.md, from the current
// directory, which must be the repository root; otherwise it checks the
// files named. Links with a scheme (https:, mailto:) and in-page anchors
// (#section) are not checked; a fragment or query on a relative link is
// ignored. Links inside code spans and fenced code blocks are not links.
//
// With -site DIR it checks the generated documentation site instead
// (go run ./internal/tools/site): every relative href and src in DIR's
// HTML pages must name a file in DIR, and every fragment an id on its page.
//
//	go run ./internal/tools/linkcheck
//	go run ./internal/tools/linkcheck README.md docs/design.md
//	go run ./internal/tools/linkcheck -site site
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

func main() {
	siteDir := flag.String("site", "", "check the HTML site in `dir` instead of Markdown")
	flag.Parse()
	if *siteDir != "" {
		mainSite(*siteDir)
		return
	}
	files := flag.Args()
	if len(files) == 0 {
		docs, _ := filepath.Glob("docs/*.md") // the pattern is valid
		files = append([]string{"README.md"}, docs...)
	}
	broken := 0
	for _, name := range files {
		n, err := checkFile(os.Stdout, name)
		if err != nil {
			fmt.Fprintf(os.Stderr, "linkcheck: %v\n", err)
			os.Exit(2)
		}
		broken += n
	}
	if broken > 0 {
		fmt.Fprintf(os.Stderr, "linkcheck: %d broken relative link(s)\n", broken)
		os.Exit(1)
	}
	fmt.Printf("linkcheck: %d file(s), every relative link resolves\n", len(files))
}

// mainSite checks the site in dir and exits non-zero on a broken link.
func mainSite(dir string) {
	pages, broken, err := checkSite(os.Stdout, dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "linkcheck: %v\n", err)
		os.Exit(2)
	}
	if pages == 0 {
		fmt.Fprintf(os.Stderr, "linkcheck: no HTML pages in %s\n", dir)
		os.Exit(2)
	}
	if broken > 0 {
		fmt.Fprintf(os.Stderr, "linkcheck: %d broken link(s) in %s\n", broken, dir)
		os.Exit(1)
	}
	fmt.Printf("linkcheck: %d page(s) in %s, every relative link and anchor resolves\n", pages, dir)
}

// checkFile reports each relative link in the Markdown file name whose target
// does not exist to w, and returns how many it reported.
func checkFile(w io.Writer, name string) (int, error) {
	f, err := os.Open(name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	broken := 0
	for _, l := range links(f) {
		target, ok := relativeTarget(l.target)
		if !ok {
			continue
		}
		path := filepath.Join(filepath.Dir(name), filepath.FromSlash(target))
		if strings.HasPrefix(target, "/") { // GitHub reads a leading slash as the repository root
			path = filepath.FromSlash(strings.TrimPrefix(target, "/"))
		}
		if _, err := os.Stat(path); err != nil {
			fmt.Fprintf(w, "%s:%d: %s does not resolve (%s)\n", name, l.line, l.target, path)
			broken++
		}
	}
	return broken, nil
}

// link is one link destination and the line it is on.
type link struct {
	line   int
	target string
}

var (
	// inline matches the destination of [text](dest "title") and ![alt](dest).
	inline = regexp.MustCompile(`\]\(\s*(<[^>]*>|[^)\s]+)`)
	// reference matches a reference definition: [label]: dest "title".
	reference = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)`)
	codeSpan  = regexp.MustCompile("`+[^`]*`+")
	fence     = regexp.MustCompile("^ {0,3}(```|~~~)")
	scheme    = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
)

// links returns the link destinations in Markdown read from r, outside code.
func links(r io.Reader) []link {
	var out []link
	sc := bufio.NewScanner(r)
	inFence := ""
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if m := fence.FindStringSubmatch(line); m != nil {
			switch inFence {
			case "":
				inFence = m[1]
			case m[1]:
				inFence = ""
			}
			continue
		}
		if inFence != "" {
			continue
		}
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range inline.FindAllStringSubmatch(line, -1) {
			out = append(out, link{n, strings.Trim(m[1], "<>")})
		}
		if m := reference.FindStringSubmatch(line); m != nil {
			out = append(out, link{n, strings.Trim(m[1], "<>")})
		}
	}
	return out
}

// relativeTarget returns the path part of a relative link destination,
// unescaped, and false for a destination that is not a relative path (a URL
// with a scheme, a protocol-relative URL, an in-page anchor).
func relativeTarget(dest string) (string, bool) {
	if dest == "" || strings.HasPrefix(dest, "#") || strings.HasPrefix(dest, "//") || scheme.MatchString(dest) {
		return "", false
	}
	if i := strings.IndexAny(dest, "#?"); i >= 0 {
		dest = dest[:i]
	}
	if p, err := url.PathUnescape(dest); err == nil {
		dest = p
	}
	return dest, dest != ""
}
