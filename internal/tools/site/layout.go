package main

import (
	"fmt"
	"html"
	"html/template"
	"strings"
)

// layoutData is what the page layout shows.
type layoutData struct {
	Title   string
	Current string // the page's file name, to mark it in the navigation
	Nav     []navItem
	Body    string // HTML, already rendered and escaped
}

// navItem is one link of the navigation.
type navItem struct {
	Href, Text string
}

var layout = template.Must(template.New("page").Funcs(template.FuncMap{
	"html": func(s string) template.HTML { return template.HTML(s) }, // the renderers escaped it
}).Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{if eq .Title "porch-go"}}porch-go: a durable rate limiter and idempotency keys for chi{{else}}{{.Title}} · porch-go{{end}}</title>
<style>` + css + `</style>
</head>
<body>
<header>
<a class="brand" href="index.html">porch-go</a>
<nav>{{range .Nav}}<a href="{{.Href}}"{{if eq .Href $.Current}} aria-current="page"{{end}}>{{.Text}}</a>{{end}}</nav>
</header>
<main>
{{html .Body}}
</main>
<footer>Built from the repository's README.md, docs/*.md and the Example functions of porch's public packages by <code>go run ./internal/tools/site</code>.</footer>
</body>
</html>
`))

const css = `
:root { --fg: #1f2328; --muted: #59636e; --line: #d1d9e0; --bg-code: #f6f8fa; --link: #0969da; --accent: #8250df; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--fg); background: #fff; font: 16px/1.6 -apple-system, "Segoe UI", "Noto Sans", Helvetica, Arial, sans-serif; }
header { border-bottom: 1px solid var(--line); background: #f6f8fa; padding: .6rem 1.5rem; display: flex; flex-wrap: wrap; align-items: baseline; gap: .4rem 1.5rem; }
header .brand { font-weight: 700; font-size: 1.15rem; color: var(--fg); }
nav { display: flex; flex-wrap: wrap; gap: .2rem 1rem; }
nav a { color: var(--muted); }
nav a[aria-current] { color: var(--fg); font-weight: 600; border-bottom: 2px solid var(--accent); }
main { max-width: 80rem; margin: 0 auto; padding: 1rem 1.5rem 3rem; }
main > :not(table) { max-width: 60rem; }
footer { max-width: 80rem; margin: 0 auto; padding: 1rem 1.5rem 2rem; color: var(--muted); font-size: .85rem; border-top: 1px solid var(--line); }
a { color: var(--link); text-decoration: none; }
a:hover { text-decoration: underline; }
h1, h2, h3, h4 { line-height: 1.25; margin: 1.6em 0 .6em; }
h1 { font-size: 2rem; border-bottom: 1px solid var(--line); padding-bottom: .3em; }
h2 { font-size: 1.5rem; border-bottom: 1px solid var(--line); padding-bottom: .3em; }
h3 { font-size: 1.2rem; }
code, pre { font-family: ui-monospace, SFMono-Regular, "SF Mono", Menlo, Consolas, "Liberation Mono", monospace; font-size: .875em; }
code { background: var(--bg-code); padding: .15em .35em; border-radius: 4px; }
pre { tab-size: 4; background: var(--bg-code); padding: .9rem 1rem; border-radius: 6px; overflow-x: auto; line-height: 1.45; border: 1px solid #e6eaef; }
pre code { background: none; padding: 0; font-size: 1em; }
blockquote { margin: 1em 0; padding: .2em 1em; color: #3d444d; border-left: .25em solid #d4a72c; background: #fff8c5; }
table { border-collapse: collapse; display: block; overflow-x: auto; margin: 1em 0; font-size: .875rem; line-height: 1.45; }
th, td { border: 1px solid var(--line); padding: .35em .7em; vertical-align: top; }
th { background: #f6f8fa; }
tr:nth-child(2n) td { background: #fafbfc; }
img { max-width: 100%; height: auto; }
.example { margin: 2rem 0; }
.output-label, .file { color: var(--muted); font-size: .85rem; margin: .4rem 0 0; }
.synopsis { color: var(--muted); }
`

// examplesIndex is the body of examples.html: each package and its examples.
func (s *site) examplesIndex() string {
	var b strings.Builder
	b.WriteString("<h1>Examples</h1>\n<p>The runnable examples of each package: <code>go test</code> runs them and checks their output, and pkg.go.dev shows them beside each package's documentation. Each package's page shows their source and output.</p>\n<ul>\n")
	for _, p := range s.pkgs {
		fmt.Fprintf(&b, "<li><a href=\"%s\"><code>%s</code></a> — %s", p.out(), html.EscapeString(p.dir), html.EscapeString(p.parse.Synopsis(p.doc)))
		b.WriteString("<ul>")
		for _, e := range p.examples {
			fmt.Fprintf(&b, "<li><a href=\"%s#%s\"><code>%s</code></a></li>", p.out(), e.name, e.name)
		}
		b.WriteString("</ul></li>\n")
	}
	b.WriteString("</ul>\n")
	return b.String()
}

// packagePage is the body of one package's page: its doc, then each
// example's doc, source and output.
func (s *site) packagePage(p *examplePackage) string {
	var b strings.Builder
	fmt.Fprintf(&b, "<h1>package %s</h1>\n", html.EscapeString(p.name))
	fmt.Fprintf(&b, "<p class=\"synopsis\"><code>import %q</code> · <a href=\"https://pkg.go.dev/%s\">reference</a> · <a href=\"%s\">source</a></p>\n",
		p.path, p.path, repoURL+p.dir)
	b.WriteString("<h2 id=\"examples\">Examples</h2>\n<ul>\n")
	for _, e := range p.examples {
		fmt.Fprintf(&b, "<li><a href=\"#%s\"><code>%s</code></a></li>\n", e.name, e.name)
	}
	b.WriteString("</ul>\n")
	for _, e := range p.examples {
		fmt.Fprintf(&b, "<section class=\"example\">\n<h3 id=\"%s\"><code>%s</code></h3>\n", e.name, e.name)
		if e.doc != "" {
			b.WriteString(p.docHTML(e.doc))
		}
		fmt.Fprintf(&b, "<p class=\"file\"><a href=\"%s\">%s</a></p>\n", repoURL+e.file, html.EscapeString(e.file))
		fmt.Fprintf(&b, "<pre><code class=\"language-go\">%s</code></pre>\n", html.EscapeString(e.code))
		if e.output != "" {
			b.WriteString("<p class=\"output-label\">Output:</p>\n")
			fmt.Fprintf(&b, "<pre class=\"output\"><code>%s</code></pre>\n", html.EscapeString(strings.TrimRight(e.output, "\n")))
		}
		b.WriteString("</section>\n")
	}
	if p.doc != "" {
		b.WriteString("<h2 id=\"overview\">Package documentation</h2>\n")
		b.WriteString(p.docHTML(p.doc))
	}
	return b.String()
}
