package porch_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The framework does not know its middlewares: the decisions of porch/rate
// and porch/idem, and the observers told of them, are declared in those
// packages, so a new middleware never needs an edit to porch. This fails
// if porch's own (non-test) files declare a name that belongs to one of
// them: a type, function, variable, constant, method, field or interface
// method beginning with Rate or Idem.
func TestPorchDeclaresNoMiddlewareNames(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		check := func(id *ast.Ident) {
			if strings.HasPrefix(id.Name, "Rate") || strings.HasPrefix(id.Name, "Idem") {
				t.Errorf("%s: porch declares %s; a middleware's names belong in its own package (porch/rate, porch/idem)",
					fset.Position(id.Pos()), id.Name)
			}
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				check(d.Name) // functions and methods
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						check(s.Name)
						var fields *ast.FieldList
						switch t := s.Type.(type) {
						case *ast.StructType:
							fields = t.Fields
						case *ast.InterfaceType:
							fields = t.Methods
						}
						if fields != nil {
							for _, fl := range fields.List {
								for _, n := range fl.Names {
									check(n)
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							check(n)
						}
					}
				}
			}
		}
	}
}

// floors places porch's packages from the bottom up: a package imports
// only packages on its floor or below, so that no import runs back up. At
// the bottom, the plumbing under porch/internal and the clock, which
// import nothing else of porch; then the driver seam, which imports
// nothing else either (as database/sql/driver imports nothing of
// database/sql); then the stores; then the framework; then its
// middlewares; then what is built on them. The first prefix that matches
// a package's path (relative to the module) places it; a package none
// matches fails the test until it is placed.
var floors = []struct {
	prefix string
	floor  int
}{
	{"porch/internal/", 0},
	{"porch/clock", 0},
	{"porch/store/driver", 1},
	{"porch/store", 2}, // store, the drivers, storetest
	// rate's counting engine knows the driver seam and the plumbing,
	// never the framework: a limiter's counts do not depend on how a
	// request arrived.
	{"porch/rate/internal/", 2},
	{"porch/rate", 4},
	{"porch/idem", 4},
	{"porch/inflight", 4},
	{"porch/shed", 4},
	{"porch/kit", 5},
	{"porch/metrics/", 5},
	{"porch/porchtest", 5},
	{"porch", 3}, // the framework itself
}

// pendingUp lists the imports that still run back up, each with what
// removes it. An entry whose import is gone fails the test too, so the
// list only shrinks.
var pendingUp = map[string]string{}

func floorOf(pkg string) (int, bool) {
	for _, f := range floors {
		if pkg == f.prefix || strings.HasPrefix(pkg, strings.TrimSuffix(f.prefix, "/")+"/") {
			return f.floor, true
		}
	}
	return 0, false
}

// porchPackages parses the non-test Go files of every package under porch/
// (build tags ignored: every file counts), by package path relative to
// the module.
func porchPackages(t *testing.T, mode parser.Mode) (*token.FileSet, map[string][]*ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	pkgs := map[string][]*ast.File{}
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, mode)
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(filepath.Join("porch", filepath.Dir(path)))
		pkgs[pkg] = append(pkgs[pkg], f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return fset, pkgs
}

// No import runs back up: the plumbing under porch/internal imports
// nothing of porch above it (not the framework, not the driver seam),
// the driver seam imports none of the stores (porch/store above all), a
// store driver imports neither the framework nor its middlewares, and
// the framework imports none of its middlewares. This fails, for
// instance, for porch/internal/algorithm importing porch/store/driver, or
// porch/store/driver importing porch/store.
func TestNoImportRunsBackUp(t *testing.T) {
	const module = "github.com/writeonce/porch-go/"
	fset, pkgs := porchPackages(t, parser.ImportsOnly)
	seen := map[string]bool{}
	for pkg, files := range pkgs {
		from, ok := floorOf(pkg)
		if !ok {
			t.Errorf("%s is on no floor: place it in floors", pkg)
			continue
		}
		for _, f := range files {
			for _, is := range f.Imports {
				imp := strings.Trim(is.Path.Value, `"`)
				if !strings.HasPrefix(imp, module) {
					continue
				}
				imp = strings.TrimPrefix(imp, module)
				to, ok := floorOf(imp)
				if !ok || to <= from {
					continue
				}
				edge := pkg + " -> " + imp
				if _, ok := pendingUp[edge]; ok {
					seen[edge] = true
					continue
				}
				t.Errorf("%s: %s imports %s, on a floor above it (%d above %d): move what they share down, or pass it in",
					fset.Position(is.Pos()), pkg, imp, to, from)
			}
		}
	}
	for edge, why := range pendingUp {
		if !seen[edge] {
			t.Errorf("pendingUp lists %s, which no longer runs back up: remove the entry (%s)", edge, why)
		}
	}
}

// No package sets another's variable: a hook that a package above fills
// in when it loads (as porch's init once set actor.Of) is an import run
// back up in disguise, and an order of initialisation nobody reads. The
// package below takes what it needs as an argument or an embedded value.
func TestNoPackageSetsAnothersVariable(t *testing.T) {
	fset, pkgs := porchPackages(t, 0)
	for _, files := range pkgs {
		for _, f := range files {
			imported := map[string]bool{}
			for _, is := range f.Imports {
				p := strings.Trim(is.Path.Value, `"`)
				name := p[strings.LastIndex(p, "/")+1:]
				if is.Name != nil {
					name = is.Name.Name
				}
				imported[name] = true
			}
			ast.Inspect(f, func(n ast.Node) bool {
				as, ok := n.(*ast.AssignStmt)
				if !ok {
					return true
				}
				for _, lhs := range as.Lhs {
					sel, ok := lhs.(*ast.SelectorExpr)
					if !ok {
						continue
					}
					// A package name resolves to no object in its file.
					if x, ok := sel.X.(*ast.Ident); ok && x.Obj == nil && imported[x.Name] {
						t.Errorf("%s: sets %s.%s, a variable of the package it imports", fset.Position(as.Pos()), x.Name, sel.Sel.Name)
					}
				}
				return true
			})
		}
	}
}

// A store driver knows the limiter's algorithms only through the seam
// (driver.Rule, driver.Policy): it imports neither porch/internal/algorithm
// nor anything else of porch/rate's, so that a driver outside this module,
// which cannot import porch's internal packages, can do all that porch's
// own drivers do. The conformance suites (porch/store/storetest) make
// rules to test with, and may.
func TestDriversKnowAlgorithmsThroughTheSeam(t *testing.T) {
	const module = "github.com/writeonce/porch-go/"
	fset, pkgs := porchPackages(t, parser.ImportsOnly)
	for pkg, files := range pkgs {
		if !strings.HasPrefix(pkg, "porch/store/") || strings.HasPrefix(pkg, "porch/store/storetest") {
			continue
		}
		for _, f := range files {
			for _, is := range f.Imports {
				if imp := strings.Trim(is.Path.Value, `"`); imp == module+"porch/internal/algorithm" {
					t.Errorf("%s: %s imports %s: give the driver what it needs of a rule through driver.Rule or driver.Policy",
						fset.Position(is.Pos()), pkg, strings.TrimPrefix(imp, module))
				}
			}
		}
	}
}
