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
