package main

import (
	"bytes"
	"os"
	"path"
	"strconv"
	"strings"
	"unicode"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/parser"
	"github.com/yuin/goldmark/text"
)

// md renders GitHub-flavoured Markdown (tables, strikethrough, autolinks,
// task lists) with an id on every heading. Raw HTML stays escaped: the docs
// have none, and a page should not start carrying some by accident.
var md = goldmark.New(
	goldmark.WithExtensions(extension.GFM),
	goldmark.WithParserOptions(parser.WithAutoHeadingID()),
)

// renderMarkdown renders the repository's Markdown file src to HTML, its
// links rewritten for the site.
func (s *site) renderMarkdown(src string) (string, error) {
	b, err := os.ReadFile(src)
	if err != nil {
		return "", err
	}
	ctx := parser.NewContext(parser.WithIDs(newGitHubIDs()))
	doc := md.Parser().Parse(text.NewReader(b), parser.WithContext(ctx))
	err = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.Link:
			n.Destination = []byte(s.rewrite(src, string(n.Destination)))
		case *ast.Image:
			n.Destination = []byte(s.rewrite(src, string(n.Destination)))
		}
		return ast.WalkContinue, nil
	})
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	if err := md.Renderer().Render(&buf, b, doc); err != nil {
		return "", err
	}
	return buf.String(), nil
}

// rewrite maps a link destination in the Markdown file from to the site: a
// link to another Markdown page goes to that page, a link to a copied asset
// to the copy, a link to any other repository file to GitHub. Fragments are
// kept; URLs with a scheme and in-page anchors are left alone.
func (s *site) rewrite(from, dest string) string {
	if dest == "" || strings.HasPrefix(dest, "#") || strings.HasPrefix(dest, "//") || hasScheme(dest) {
		return dest
	}
	target, frag := dest, ""
	if i := strings.IndexAny(dest, "#?"); i >= 0 {
		target, frag = dest[:i], dest[i:]
	}
	var repoPath string
	if strings.HasPrefix(target, "/") { // GitHub reads a leading slash as the repository root
		repoPath = path.Clean(strings.TrimPrefix(target, "/"))
	} else {
		repoPath = path.Clean(path.Join(path.Dir(from), target))
	}
	for _, p := range s.pages {
		if p.src == repoPath {
			return p.out + frag
		}
	}
	for _, a := range s.assets {
		if a == repoPath {
			return path.Base(a) + frag
		}
	}
	if strings.HasPrefix(repoPath, "../") || repoPath == ".." {
		return dest // outside the repository: nothing better to do
	}
	return repoURL + repoPath + frag
}

// hasScheme reports whether dest starts with a URL scheme ("https:").
func hasScheme(dest string) bool {
	i := strings.IndexByte(dest, ':')
	if i <= 0 {
		return false
	}
	for j, c := range dest[:i] {
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (j == 0 || !(c >= '0' && c <= '9' || c == '+' || c == '.' || c == '-')) {
			return false
		}
	}
	return true
}

// githubIDs makes heading ids the way GitHub does, so that links written
// for GitHub (docs/design.md#the-pool) work on the site too: lower case,
// letters, digits, '-' and '_' kept, spaces turned into '-', everything
// else (punctuation, backticks, symbols) dropped; a repeated id gets "-1",
// "-2", … It is not safe for concurrent use; make one per document.
type githubIDs struct {
	used map[string]bool
}

func newGitHubIDs() *githubIDs { return &githubIDs{used: map[string]bool{}} }

// Generate returns the id of a heading whose source text is value.
func (g *githubIDs) Generate(value []byte, kind ast.NodeKind) []byte {
	var b strings.Builder
	for _, r := range strings.TrimSpace(string(value)) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(unicode.ToLower(r))
		case r == ' ':
			b.WriteByte('-')
		}
	}
	id := b.String()
	if id == "" {
		id = "section"
	}
	base := id
	for i := 1; g.used[id]; i++ {
		id = base + "-" + strconv.Itoa(i)
	}
	g.used[id] = true
	return []byte(id)
}

// Put records an id given explicitly, so that Generate does not repeat it.
func (g *githubIDs) Put(value []byte) { g.used[string(value)] = true }
