package main

import (
	"fmt"
	"html"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

var (
	// attrLink matches the value of an href or src attribute.
	attrLink = regexp.MustCompile(`\s(?:href|src)="([^"]*)"`)
	// attrID matches the value of an id attribute.
	attrID = regexp.MustCompile(`\sid="([^"]*)"`)
)

// checkSite reports to w each relative link or anchor in the HTML files
// under dir that does not resolve: a link to a file that is not in dir, or
// a fragment (page.html#x, #x) naming no id on its page. It returns the
// number of pages checked and of broken links. The pages are the generated
// site (internal/tools/site), so attributes are double-quoted and
// HTML-escaped, and matching them needs no HTML parser.
func checkSite(w io.Writer, dir string) (pages, broken int, err error) {
	ids := map[string]map[string]bool{} // slash path under dir → its ids
	bodies := map[string]string{}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".html") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p) // p is under dir
		rel = filepath.ToSlash(rel)
		bodies[rel] = string(b)
		ids[rel] = map[string]bool{}
		for _, m := range attrID.FindAllStringSubmatch(string(b), -1) {
			ids[rel][html.UnescapeString(m[1])] = true
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	names := make([]string, 0, len(bodies))
	for name := range bodies {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for _, m := range attrLink.FindAllStringSubmatch(bodies[name], -1) {
			dest := html.UnescapeString(m[1])
			if problem := checkSiteLink(dir, name, dest, ids); problem != "" {
				fmt.Fprintf(w, "%s: %s %s\n", filepath.Join(dir, name), dest, problem)
				broken++
			}
		}
	}
	return len(names), broken, nil
}

// checkSiteLink says what is wrong with the link dest on the page from
// (slash path under dir), or "" when it resolves or is not relative.
func checkSiteLink(dir, from, dest string, ids map[string]map[string]bool) string {
	if strings.HasPrefix(dest, "//") || scheme.MatchString(dest) {
		return ""
	}
	target, frag, _ := strings.Cut(dest, "#")
	if i := strings.IndexByte(target, '?'); i >= 0 {
		target = target[:i]
	}
	if p, err := url.PathUnescape(target); err == nil {
		target = p
	}
	page := from
	if target != "" {
		if strings.HasPrefix(target, "/") {
			return "is absolute: the site must work from any directory"
		}
		page = path.Clean(path.Join(path.Dir(from), target))
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(page))); err != nil {
			return "does not resolve (no " + page + ")"
		}
	}
	if frag == "" {
		return ""
	}
	if f, err := url.PathUnescape(frag); err == nil {
		frag = f
	}
	pageIDs, isPage := ids[page]
	if !isPage {
		return "" // a fragment into an SVG or another asset: not checked
	}
	if !pageIDs[frag] {
		return "names no anchor on " + page
	}
	return ""
}
