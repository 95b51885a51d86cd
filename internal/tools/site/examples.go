package main

import (
	"go/ast"
	"go/doc"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// modulePath is the module's import path prefix.
const modulePath = "github.com/writeonce/porch-go"

// examplePackage is one package under porch/ with runnable examples.
type examplePackage struct {
	dir      string // repository-relative, slash-separated: "porch/rate"
	path     string // import path
	name     string // package name
	doc      string // package comment, as go/doc parsed it
	parse    *doc.Package
	examples []example
	// topLevel holds the names declared at the top level of any of the
	// directory's files, test files and both packages included.
	topLevel map[string]bool
}

// out is the package's page in the site: examples-porch-rate.html.
func (p *examplePackage) out() string {
	return "examples-" + strings.ReplaceAll(p.dir, "/", "-") + ".html"
}

// example is one Example function: what `go test` runs and checks.
type example struct {
	name   string // the function's name: "ExampleNew"
	doc    string // its doc comment
	code   string // its source, without the output comment
	output string // the // Output: text; empty when the example is only compiled
	file   string // the repository-relative file it is in
	// wholeFile is set when go doc shows the whole file as the example (one
	// example, other declarations, no tests): its code is then the file,
	// and the example may use the file's own declarations.
	wholeFile bool
	fn        *ast.FuncDecl
	ast       *ast.File // the file fn is in
}

// examplePackages finds every public package under root whose test files
// hold Example functions, sorted by directory. Packages under an internal
// directory are left out: an application cannot import them, so their
// examples document nothing it can use.
func examplePackages(root string) ([]*examplePackage, error) {
	var pkgs []*examplePackage
	err := filepath.WalkDir(root, func(dir string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if name := d.Name(); name == "testdata" || name == "internal" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
			return filepath.SkipDir
		}
		pkg, err := loadExamples(filepath.ToSlash(dir))
		if err != nil {
			return err
		}
		if pkg != nil {
			pkgs = append(pkgs, pkg)
		}
		return nil
	})
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].dir < pkgs[j].dir })
	return pkgs, err
}

// loadExamples parses the Go files of dir, and returns its package and
// examples, or nil when it has no examples.
func loadExamples(dir string) (*examplePackage, error) {
	names, _ := filepath.Glob(filepath.Join(dir, "*.go")) // the pattern is valid
	fset := token.NewFileSet()
	var files, tests []*ast.File
	sources := map[*ast.File][]byte{}
	for _, name := range names {
		src, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		if strings.HasSuffix(name, "_test.go") {
			tests = append(tests, f)
			sources[f] = src
		} else {
			files = append(files, f)
		}
	}
	exs := doc.Examples(tests...)
	if len(exs) == 0 || len(files) == 0 {
		return nil, nil
	}
	importPath := modulePath + "/" + dir
	dp, err := doc.NewFromFiles(fset, files, importPath)
	if err != nil {
		return nil, err
	}
	pkg := &examplePackage{dir: dir, path: importPath, name: dp.Name, doc: dp.Doc, parse: dp,
		topLevel: topLevelNames(append(files, tests...))}
	for _, ex := range exs {
		_, whole := ex.Code.(*ast.File)
		e := example{name: "Example" + ex.Name, doc: ex.Doc, output: ex.Output, wholeFile: whole}
		for _, f := range tests {
			if fn, code, ok := exampleSource(fset, f, sources[f], e.name, whole); ok {
				e.code, e.fn, e.ast = code, fn, f
				e.file = filepath.ToSlash(fset.File(f.Pos()).Name())
				break
			}
		}
		pkg.examples = append(pkg.examples, e)
	}
	sort.Slice(pkg.examples, func(i, j int) bool { return pkg.examples[i].name < pkg.examples[j].name })
	return pkg, nil
}

// exampleSource returns the function name in f and its source, as written,
// without its doc comment and without the trailing output comment, which
// the page shows on its own. For a whole-file example the source is the
// file's, around that function, since the function alone uses declarations
// a reader would not have.
func exampleSource(fset *token.FileSet, f *ast.File, src []byte, name string, wholeFile bool) (*ast.FuncDecl, string, bool) {
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv != nil || fn.Name.Name != name {
			continue
		}
		start, end := fset.Position(fn.Pos()).Offset, fset.Position(fn.End()).Offset
		lines := strings.Split(string(src[start:end]), "\n")
		for i := len(lines) - 1; i > 0; i-- {
			t := strings.TrimSpace(lines[i])
			if strings.HasPrefix(t, "// Output:") || strings.HasPrefix(t, "// Unordered output:") {
				// Drop the output comment and the blank lines before it;
				// keep the closing brace.
				brace := lines[len(lines)-1]
				lines = lines[:i]
				for len(lines) > 1 && strings.TrimSpace(lines[len(lines)-1]) == "" {
					lines = lines[:len(lines)-1]
				}
				lines = append(lines, brace)
				break
			}
		}
		code := strings.Join(lines, "\n")
		if wholeFile {
			before := start
			if fn.Doc != nil {
				before = fset.Position(fn.Doc.Pos()).Offset
			}
			code = string(src[:before]) + code + string(src[end:])
		}
		return fn, code, true
	}
	return nil, "", false
}

// topLevelNames returns the names the files declare at the top level.
func topLevelNames(files []*ast.File) map[string]bool {
	names := map[string]bool{}
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					names[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						names[s.Name.Name] = true
					case *ast.ValueSpec:
						for _, n := range s.Names {
							names[n.Name] = true
						}
					}
				}
			}
		}
	}
	return names
}

// unexported returns the unexported top-level names of the example's
// package that its code uses, which a reader who copies it out of the
// package does not have (a whole-file example may use its own file's: the
// page shows them). It relies on the parser's object resolution: a local
// resolves to its own declaration, a name of this file to the file's
// scope, and a name of another file stays unresolved.
func (p *examplePackage) unexported(e example) []string {
	var found []string
	var visit func(n ast.Node) bool
	visit = func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr: // x.f: f is a field or method, not a top-level name
			ast.Inspect(n.X, visit)
			return false
		case *ast.KeyValueExpr: // T{f: v}: f may be a field of T
			if _, ok := n.Key.(*ast.Ident); ok {
				ast.Inspect(n.Value, visit)
				return false
			}
		case *ast.Ident:
			if token.IsExported(n.Name) || n.Name == "_" || !p.topLevel[n.Name] {
				return false
			}
			ofFile := n.Obj != nil && e.ast.Scope.Lookup(n.Name) == n.Obj
			if n.Obj != nil && !ofFile {
				return false // a local that shadows the top-level name
			}
			if ofFile && e.wholeFile {
				return false
			}
			found = append(found, n.Name)
		}
		return true
	}
	ast.Inspect(e.fn.Body, visit)
	return found
}

// docHTML renders a Go doc comment (package or example) as HTML, its doc
// links ([Limiter], [net/http.Handler]) pointing at pkg.go.dev.
func (p *examplePackage) docHTML(text string) string {
	parser := p.parse.Parser()
	printer := p.parse.Printer()
	printer.HeadingLevel = 3
	printer.DocLinkURL = func(link *comment.DocLink) string {
		path, frag := link.ImportPath, link.Name
		if path == "" {
			path = p.path
		}
		if link.Recv != "" {
			frag = link.Recv + "." + link.Name
		}
		if frag == "" {
			return "https://pkg.go.dev/" + path
		}
		return "https://pkg.go.dev/" + path + "#" + frag
	}
	printer.HeadingID = func(h *comment.Heading) string { return "hdr-" + strings.ReplaceAll(headingText(h), " ", "_") }
	return string(printer.HTML(parser.Parse(text)))
}

// headingText is the plain text of a doc comment heading.
func headingText(h *comment.Heading) string {
	var b strings.Builder
	for _, t := range h.Text {
		if p, ok := t.(comment.Plain); ok {
			b.WriteString(string(p))
		}
	}
	return b.String()
}
