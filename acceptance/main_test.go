//go:build acceptance

package acceptance

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// storefrontBin is the storefront binary TestMain builds once for every leg.
var storefrontBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "porch-acceptance-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "acceptance: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	storefrontBin = filepath.Join(dir, "storefront")
	build := exec.Command("go", "build", "-o", storefrontBin, "./sample/storefront")
	build.Dir = ".." // the module root: this package sits one level below it
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "acceptance: build storefront: %v\n", err)
		return 1
	}
	return m.Run()
}
