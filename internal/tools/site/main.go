// Command site builds porch-go's static documentation site: README.md and
// docs/*.md rendered with goldmark (GitHub-flavoured Markdown, GitHub's
// heading anchors), one page per package of porch/ with its runnable
// examples (source and output), and the charts under docs/*.svg copied
// beside the pages. Links between the Markdown files become links between
// the pages, anchors kept; links to other files of the repository go to
// GitHub. The pages need no JavaScript and load nothing from elsewhere.
//
// Run it from the repository root; it replaces the output directory:
//
//	go run ./internal/tools/site            # writes site/
//	go run ./internal/tools/site -out /tmp/site
//	go run ./internal/tools/linkcheck -site site
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// repoURL is where links to repository files that are not pages go.
const repoURL = "https://github.com/writeonce/porch-go/blob/main/"

// docOrder puts the docs in reading order in the navigation; a doc not
// named here follows them, by name.
var docOrder = []string{"design", "algorithms", "deploying", "idempotency", "performance", "comparison", "observability"}

func main() {
	out := flag.String("out", "site", "the output `directory`, replaced")
	flag.Parse()
	if err := build(*out); err != nil {
		fmt.Fprintf(os.Stderr, "site: %v\n", err)
		os.Exit(1)
	}
}

// build writes the whole site to dir.
func build(dir string) error {
	pages, err := markdownPages()
	if err != nil {
		return err
	}
	pkgs, err := examplePackages("porch")
	if err != nil {
		return err
	}
	assets, _ := filepath.Glob("docs/*.svg") // the pattern is valid
	s := &site{pages: pages, pkgs: pkgs, assets: assets}

	if err := safeToReplace(dir); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, p := range pages {
		body, err := s.renderMarkdown(p.src)
		if err != nil {
			return fmt.Errorf("%s: %w", p.src, err)
		}
		if err := s.write(dir, p.out, p.title, body); err != nil {
			return err
		}
	}
	if err := s.write(dir, "examples.html", "Examples", s.examplesIndex()); err != nil {
		return err
	}
	for _, pkg := range pkgs {
		if err := s.write(dir, pkg.out(), pkg.path, s.packagePage(pkg)); err != nil {
			return err
		}
	}
	for _, a := range assets {
		b, err := os.ReadFile(a)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(a)), b, 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("site: %d page(s), %d example package(s), %d chart(s) in %s/\n",
		len(pages)+1+len(pkgs), len(pkgs), len(assets), dir)
	return nil
}

// safeToReplace refuses an output directory whose removal would take the
// repository with it: the current directory or one above it.
func safeToReplace(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	if rel, err := filepath.Rel(abs, wd); err == nil && !strings.HasPrefix(rel, "..") {
		return fmt.Errorf("-out %s holds the current directory; it is replaced, so name a directory of its own", dir)
	}
	return nil
}

// page is one Markdown file of the repository and the page it becomes.
type page struct {
	src   string // repository-relative, slash-separated: "README.md", "docs/design.md"
	out   string // the page's file name in the site: "index.html", "design.html"
	title string // the file's first heading
	nav   string // its name in the navigation: "Home", or the file's name capitalized
}

// markdownPages lists README.md and docs/*.md in navigation order.
func markdownPages() ([]page, error) {
	docs, _ := filepath.Glob("docs/*.md") // the pattern is valid
	rank := func(name string) int {
		for i, d := range docOrder {
			if d == name {
				return i
			}
		}
		return len(docOrder)
	}
	sort.SliceStable(docs, func(i, j int) bool {
		a, b := docName(docs[i]), docName(docs[j])
		if rank(a) != rank(b) {
			return rank(a) < rank(b)
		}
		return a < b
	})
	pages := []page{{src: "README.md", out: "index.html", nav: "Home"}}
	for _, d := range docs {
		name := docName(d)
		nav := strings.ToUpper(name[:1]) + name[1:] // a title can be a sentence; the file name is short
		pages = append(pages, page{src: filepath.ToSlash(d), out: name + ".html", nav: nav})
	}
	for i := range pages {
		src, err := os.ReadFile(pages[i].src)
		if err != nil {
			return nil, err
		}
		pages[i].title = firstHeading(src, pages[i].nav)
	}
	return pages, nil
}

// docName is a doc's file name without directory and extension.
func docName(path string) string {
	return strings.TrimSuffix(filepath.Base(path), ".md")
}

// firstHeading returns the text of the first "# " heading in Markdown src,
// or def when it has none.
func firstHeading(src []byte, def string) string {
	for _, line := range strings.Split(string(src), "\n") {
		if t, ok := strings.CutPrefix(line, "# "); ok {
			return strings.TrimSpace(t)
		}
	}
	return def
}

// site is what every page links to: the Markdown pages, the example
// packages and the copied assets.
type site struct {
	pages  []page
	pkgs   []*examplePackage
	assets []string // repository-relative paths of files copied to the site's root
}

// write writes one page, in the layout, to dir/name.
func (s *site) write(dir, name, title, body string) error {
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	err = layout.Execute(f, layoutData{Title: title, Current: name, Nav: s.nav(), Body: body})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// nav is the navigation every page carries.
func (s *site) nav() []navItem {
	var items []navItem
	for _, p := range s.pages {
		items = append(items, navItem{Href: p.out, Text: p.nav})
	}
	return append(items, navItem{Href: "examples.html", Text: "Examples"})
}
