package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLinks(t *testing.T) {
	md := strings.Join([]string{
		"See [the design](docs/design.md) and ![a picture](img/a.png \"title\").",
		"A [site](https://example.com), an [anchor](#ledger), [mail](mailto:a@b.c).",
		"`[not a link](nowhere.md)` in a code span.",
		"```",
		"[inside a fence](fenced.md)",
		"```",
		"[ref]: <docs/with space.md>",
		"[pointed](docs/design.md#the-pool) [root](/go.mod)",
	}, "\n")
	var got []string
	for _, l := range links(strings.NewReader(md)) {
		if target, ok := relativeTarget(l.target); ok {
			got = append(got, target)
		}
	}
	want := []string{"docs/design.md", "img/a.png", "docs/with space.md", "docs/design.md", "/go.mod"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("relative targets: got %q, want %q", got, want)
	}
}

func TestCheckFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "docs"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"docs/a.md": "[up](../README.md) [sibling](b.md) [missing](c.md)\n",
		"docs/b.md": "",
		"README.md": "[a](docs/a.md) [gone](docs/gone.md#x)\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		file       string
		wantBroken int
		wantOut    string
	}{
		{"README.md", 1, "README.md:1: docs/gone.md#x does not resolve"},
		{"docs/a.md", 1, "a.md:1: c.md does not resolve"},
		{"docs/b.md", 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			var out strings.Builder
			n, err := checkFile(&out, filepath.Join(dir, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if n != tc.wantBroken || !strings.Contains(out.String(), tc.wantOut) {
				t.Errorf("got %d broken, output %q; want %d and %q", n, out.String(), tc.wantBroken, tc.wantOut)
			}
		})
	}
}

func TestCheckSite(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"index.html": `<h1 id="top">x</h1><a href="a.html#ok">a</a> <a href="a.html#gone">b</a> <a href="#top">c</a>` +
			` <a href="#nowhere">d</a> <img src="chart.svg"> <a href="missing.html">e</a> <a href="https://example.com/#x">f</a>` +
			` <a href="/abs.html">g</a> <a href="a.html?q=1&amp;r=2">h</a>`,
		"a.html":    `<h2 id="ok">ok</h2>`,
		"chart.svg": `<svg/>`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	pages, broken, err := checkSite(&out, dir)
	if err != nil {
		t.Fatal(err)
	}
	if pages != 2 {
		t.Errorf("got %d pages, want 2", pages)
	}
	for _, want := range []string{"a.html#gone names no anchor", "#nowhere names no anchor", "missing.html does not resolve", "/abs.html is absolute"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output %q lacks %q", out.String(), want)
		}
	}
	if broken != 4 {
		t.Errorf("got %d broken, want 4; output:\n%s", broken, out.String())
	}
}
