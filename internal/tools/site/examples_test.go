package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// The site shows each example's code for a reader to copy into a program of
// their own, outside the package: it must use nothing of the package that is
// unexported, such as a helper its test files share.
func TestExamplesUseOnlyExportedNames(t *testing.T) {
	t.Chdir("../../..") // the module root, where the site generator runs
	n := 0
	for _, root := range []string{"porch", "sample"} {
		if _, err := os.Stat(root); err != nil {
			t.Fatal(err)
		}
		pkgs, err := examplePackages(root)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pkgs {
			for _, e := range p.examples {
				n++
				if e.fn == nil {
					t.Errorf("%s.%s: source not found", p.dir, e.name)
					continue
				}
				if names := p.unexported(e); len(names) > 0 {
					t.Errorf("%s: %s uses %q, unexported: a copy of it does not compile outside the package",
						e.file, e.name, names)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no examples found: the check checked nothing")
	}
	t.Logf("%d examples checked", n)
}

// The check itself: it must see a helper of another file, a type of the
// same file, and not a local that shadows a top-level name.
func TestUnexportedNames(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		if err := os.WriteFile(dir+"/"+name, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("p.go", "package p\n\nfunc Hello() string { return greeting }\n\nvar greeting = \"hi\"\n")
	write("helpers_test.go", "package p_test\n\nfunc helper() int { return 1 }\n\nvar shadowed = 2\n")
	write("example_test.go", `package p_test

import (
	"fmt"

	"example.com/p"
)

type local struct{ n int }

func (local) String() string { return "local" }

func ExampleHello() {
	shadowed := 3
	fmt.Println(p.Hello(), helper(), local{n: shadowed}, fmt.Sprint(shadowed))
	// Output: hi 1 local 3
}

func ExampleHello_field() {
	fmt.Println(struct{ greeting string }{greeting: "x"}.greeting)
	// Output: x
}
`)
	write("whole_test.go", `package p_test

import "fmt"

type stamp struct{}

func ExampleHello_whole() {
	fmt.Println(stamp{})
	// Output: {}
}
`)
	pkg, err := loadExamples(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"ExampleHello":       "[helper local]",
		"ExampleHello_field": "[]", // greeting is a field here, not p's var
		"ExampleHello_whole": "[]", // the page shows stamp with it
	}
	for _, e := range pkg.examples {
		if got := fmt.Sprint(pkg.unexported(e)); got != want[e.name] {
			t.Errorf("%s: got %s, want %s", e.name, got, want[e.name])
		}
		delete(want, e.name)
	}
	if len(want) > 0 {
		t.Errorf("examples not found: %v", want)
	}
}

// The site documents what an application can import: no package under an
// internal directory gets a page, though porch/internal has examples.
func TestNoInternalPackages(t *testing.T) {
	t.Chdir("../../..")
	pkgs, err := examplePackages("porch")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkgs {
		if strings.Contains("/"+p.dir+"/", "/internal/") {
			t.Errorf("%s: an internal package has a page", p.dir)
		}
	}
	if len(pkgs) == 0 {
		t.Fatal("no packages found: the check checked nothing")
	}
}
