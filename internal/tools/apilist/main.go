// Command apilist prints porch's public API: every exported declaration of
// the packages a user imports, without doc comments or bodies, one per
// line, sorted, with a count per package. The listing is kept in api.txt
// at the repository root, and CI fails when it differs from the code, so
// that a change to the public API is made on purpose and recorded in
// CHANGELOG.md.
//
//	go run ./internal/tools/apilist > api.txt   # after a deliberate change
//	go run ./internal/tools/apilist -check      # what CI runs
//
// Names are counted as pkg.go.dev shows them: top-level funcs, types,
// consts and vars, methods of exported types, exported struct fields and
// interface methods, in non-test files. An alias of a type declared under
// porch/internal (driver.State) is listed as that type, fields and methods
// included, since a reader meets them under the alias; an unexported
// embedded type is not listed, as pkg.go.dev does not show it. A name
// declared twice (in files for different builds) is an error: one
// declaration, one doc.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// module is the import path the listing names packages by.
const module = "github.com/writeonce/porch-go"

func main() {
	check := flag.Bool("check", false, "compare with api.txt instead of printing; exit 1 on a difference")
	file := flag.String("file", "api.txt", "the recorded listing, for -check")
	flag.Parse()
	out, err := listing("porch")
	if err != nil {
		fmt.Fprintln(os.Stderr, "apilist:", err)
		os.Exit(2)
	}
	if !*check {
		os.Stdout.Write(out)
		return
	}
	want, err := os.ReadFile(*file)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apilist:", err)
		os.Exit(2)
	}
	if !bytes.Equal(want, out) {
		fmt.Fprintf(os.Stderr, "apilist: the public API differs from %s:\n%s\n"+
			"If the change is deliberate, run `go run ./internal/tools/apilist > %s` and record it in CHANGELOG.md.\n",
			*file, diff(string(want), string(out)), *file)
		os.Exit(1)
	}
}

// listing walks root for public packages (not internal, not testdata, not
// commands) and returns the whole listing.
func listing(root string) ([]byte, error) {
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if name := d.Name(); name == "internal" || name == "testdata" {
			return filepath.SkipDir
		}
		dirs = append(dirs, path)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(dirs)
	var buf bytes.Buffer
	total := 0
	for _, dir := range dirs {
		lines, err := pkgAPI(dir)
		if err != nil {
			return nil, err
		}
		if lines == nil {
			continue
		}
		n := 0
		for _, l := range lines {
			if !strings.HasPrefix(l, "embed ") { // an embedded type is not a name of its own
				n++
			}
		}
		fmt.Fprintf(&buf, "## %s/%s (%d names)\n", module, filepath.ToSlash(dir), n)
		for _, l := range lines {
			buf.WriteString(l)
			buf.WriteByte('\n')
		}
		buf.WriteByte('\n')
		total += n
	}
	fmt.Fprintf(&buf, "## total: %d names\n", total)
	return buf.Bytes(), nil
}

// pkgAPI returns one line per exported name of the package in dir, or nil
// if dir holds no non-test Go package (or only a command).
func pkgAPI(dir string) ([]string, error) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for name, p := range pkgs {
		if name == "main" {
			continue
		}
		for _, f := range p.Files {
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		return nil, nil
	}
	exported := map[string]bool{}
	for _, f := range files {
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, s := range g.Specs {
					if ts := s.(*ast.TypeSpec); ts.Name.IsExported() {
						exported[ts.Name.Name] = true
					}
				}
			}
		}
	}
	var lines []string
	add := func(node any) { lines = append(lines, render(fset, node)) }
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() || (d.Recv != nil && !exported[recvName(d.Recv)]) {
					continue
				}
				add(&ast.FuncDecl{Recv: d.Recv, Name: d.Name, Type: d.Type})
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						al, ok, err := internalAlias(fset, f, s)
						if err != nil {
							return nil, err
						}
						if !ok {
							al = typeLines(fset, s)
						}
						lines = append(lines, al...)
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								line := d.Tok.String() + " " + n.Name
								if s.Type != nil {
									line += " " + render(fset, s.Type)
								}
								lines = append(lines, line)
							}
						}
					}
				}
			}
		}
	}
	sort.Strings(lines)
	for i := 1; i < len(lines); i++ {
		if lines[i] == lines[i-1] && !strings.HasPrefix(lines[i], "embed ") {
			// One name declared in files behind exclusive build tags: each
			// build sees one, but the two docs drift apart, and a reader
			// of the source, or of this listing, meets it twice.
			return nil, fmt.Errorf("%s: %q is declared more than once (in files for different builds?); declare it once, in a file every build compiles", dir, lines[i])
		}
	}
	return lines, nil
}

// typeLines lists an exported type, and then each exported field or
// interface method as a name of its own.
func typeLines(fset *token.FileSet, s *ast.TypeSpec) []string {
	name := s.Name.Name
	switch t := s.Type.(type) {
	case *ast.StructType:
		lines := []string{"type " + name + " struct"}
		for _, f := range t.Fields.List {
			for _, n := range f.Names {
				if n.IsExported() {
					lines = append(lines, "field "+name+"."+n.Name+" "+render(fset, f.Type))
				}
			}
			if len(f.Names) == 0 && ast.IsExported(embeddedName(f.Type)) { // embedded, and shown
				lines = append(lines, "embed "+name+" "+render(fset, f.Type))
			}
		}
		return lines
	case *ast.InterfaceType:
		lines := []string{"type " + name + " interface"}
		for _, m := range t.Methods.List {
			for _, n := range m.Names {
				if n.IsExported() {
					lines = append(lines, "method "+name+"."+n.Name+strings.TrimPrefix(render(fset, m.Type), "func"))
				}
			}
			if len(m.Names) == 0 {
				lines = append(lines, "embed "+name+" "+render(fset, m.Type))
			}
		}
		return lines
	default:
		tp := ""
		if s.TypeParams != nil {
			tp = render(fset, s.TypeParams)
		}
		eq := " "
		if s.Assign.IsValid() {
			eq = " = "
		}
		return []string{"type " + name + tp + eq + render(fset, s.Type)}
	}
}

// embeddedName is the field name an embedded type gives its field: an
// unexported one is hidden, as pkg.go.dev hides it.
func embeddedName(t ast.Expr) string {
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	switch x := t.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return x.Sel.Name
	}
	return ""
}

// internalAlias lists an exported alias of a type declared under
// porch/internal (type State = counter.State) as that type itself, its
// fields and methods included: a reader meets them under the alias's name,
// since the package that declares them cannot be imported. ok is false for
// any other type. The alias must keep the type's name, so that the lines
// read as if it were declared here.
func internalAlias(fset *token.FileSet, f *ast.File, s *ast.TypeSpec) (lines []string, ok bool, err error) {
	sel, isSel := s.Type.(*ast.SelectorExpr)
	if !s.Assign.IsValid() || !isSel {
		return nil, false, nil
	}
	x, isIdent := sel.X.(*ast.Ident)
	if !isIdent {
		return nil, false, nil
	}
	var imp string
	for _, is := range f.Imports {
		p, _ := strconv.Unquote(is.Path.Value)
		if (is.Name != nil && is.Name.Name == x.Name) || (is.Name == nil && path.Base(p) == x.Name) {
			imp = p
		}
	}
	if !strings.HasPrefix(imp, module+"/porch/internal/") {
		return nil, false, nil
	}
	if sel.Sel.Name != s.Name.Name {
		return nil, false, fmt.Errorf("type %s = %s.%s: an alias of an internal type must keep its name", s.Name.Name, x.Name, sel.Sel.Name)
	}
	pkgs, err := parser.ParseDir(fset, filepath.FromSlash(strings.TrimPrefix(imp, module+"/")), func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		return nil, false, err
	}
	for _, p := range pkgs {
		for _, pf := range p.Files {
			for _, d := range pf.Decls {
				switch d := d.(type) {
				case *ast.GenDecl:
					for _, ds := range d.Specs {
						if ts, isType := ds.(*ast.TypeSpec); isType && ts.Name.Name == sel.Sel.Name {
							lines = append(lines, typeLines(fset, ts)...)
							ok = true
						}
					}
				case *ast.FuncDecl:
					if d.Recv != nil && d.Name.IsExported() && recvName(d.Recv) == sel.Sel.Name {
						lines = append(lines, render(fset, &ast.FuncDecl{Recv: d.Recv, Name: d.Name, Type: d.Type}))
					}
				}
			}
		}
	}
	if !ok {
		return nil, false, fmt.Errorf("type %s: %s declares no %s", s.Name.Name, imp, sel.Sel.Name)
	}
	return lines, true, nil
}

func recvName(recv *ast.FieldList) string {
	t := recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// render prints node on one line.
func render(fset *token.FileSet, node any) string {
	var b bytes.Buffer
	if err := printer.Fprint(&b, fset, node); err != nil {
		panic(err)
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

// diff lists the lines only in want (-) and only in got (+).
func diff(want, got string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}
