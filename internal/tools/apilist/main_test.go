package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Every exported name of porch's packages is declared once, in a file
// every build compiles, so that api.txt lists it once and it has one doc.
func TestPublicAPIDeclaresEachNameOnce(t *testing.T) {
	t.Chdir("../../..") // the module root, where listing's paths start
	if _, err := listing("porch"); err != nil {
		t.Fatal(err)
	}
}

// A name declared in two files behind exclusive build tags is refused,
// naming it.
func TestListingRefusesANameDeclaredTwice(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"a_unix.go":  "//go:build unix\n\npackage p\n\nimport \"errors\"\n\nvar ErrGone = errors.New(\"gone\")\n",
		"a_other.go": "//go:build !unix\n\npackage p\n\nimport \"errors\"\n\nvar ErrGone = errors.New(\"gone\")\n",
	}
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, err := pkgAPI(dir)
	if err == nil || !strings.Contains(err.Error(), "var ErrGone") {
		t.Errorf("pkgAPI of a package declaring ErrGone twice: %v, want an error naming var ErrGone", err)
	}
}

// The docs of porch's public packages (the package comment, and the doc of
// every exported declaration, field and interface method) cite no name of
// an internal package: a reader cannot look it up, and go doc does not
// link it. They state what it stands for instead ("every 10 s", not
// errlog.DefaultEvery).
func TestDocsCiteNoInternalNames(t *testing.T) {
	t.Chdir("../../..")
	internal := internalPackages(t, ".")
	if len(internal) == 0 {
		t.Fatal("found no internal packages; is the walk at the module root?")
	}
	cite := regexp.MustCompile(`\b(` + strings.Join(internal, "|") + `)\.[A-Z]\w*`)
	err := filepath.WalkDir("porch", func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if name := d.Name(); name == "internal" || name == "testdata" {
			return filepath.SkipDir
		}
		fset := token.NewFileSet()
		pkgs, err := parser.ParseDir(fset, path, func(fi fs.FileInfo) bool {
			return !strings.HasSuffix(fi.Name(), "_test.go")
		}, parser.ParseComments)
		if err != nil {
			return err
		}
		for name, p := range pkgs {
			if name == "main" {
				continue
			}
			for _, f := range p.Files {
				for _, doc := range publicDocs(f) {
					for _, m := range cite.FindAllString(doc.Text(), -1) {
						t.Errorf("%s: a public doc cites %s, a name of an internal package", fset.Position(doc.Pos()), m)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// internalPackages names every package under an internal directory below
// root.
func internalPackages(t *testing.T, root string) []string {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if d.Name() == "testdata" || (d.Name() != "." && strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if slices.Contains(strings.Split(filepath.ToSlash(path), "/"), "internal") && d.Name() != "internal" {
			if gofiles, _ := filepath.Glob(filepath.Join(path, "*.go")); len(gofiles) > 0 {
				seen[d.Name()] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	names := slices.Sorted(maps.Keys(seen))
	return names
}

// publicDocs returns f's package comment and the docs of its exported
// declarations, their exported fields and interface methods.
func publicDocs(f *ast.File) []*ast.CommentGroup {
	var docs []*ast.CommentGroup
	add := func(g *ast.CommentGroup) {
		if g != nil {
			docs = append(docs, g)
		}
	}
	add(f.Doc)
	fields := func(l *ast.FieldList) {
		for _, fl := range l.List {
			if len(fl.Names) == 0 || fl.Names[0].IsExported() {
				add(fl.Doc)
				add(fl.Comment)
			}
		}
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Name.IsExported() {
				add(d.Doc)
			}
		case *ast.GenDecl:
			exported := false
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					exported = true
					add(s.Doc)
					switch t := s.Type.(type) {
					case *ast.StructType:
						fields(t.Fields)
					case *ast.InterfaceType:
						fields(t.Methods)
					}
				case *ast.ValueSpec:
					if slices.ContainsFunc(s.Names, (*ast.Ident).IsExported) {
						exported = true
						add(s.Doc)
						add(s.Comment)
					}
				}
			}
			if exported {
				add(d.Doc)
			}
		}
	}
	return docs
}
