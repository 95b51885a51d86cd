package main

import (
	"os"
	"path/filepath"
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
