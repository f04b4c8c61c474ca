package ocitest

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	execdOnce sync.Once
	execdPath string
	execdErr  error
	execdOut  []byte
)

// ExecdBinary builds the static hybox-execd once per test binary and
// returns its path.
func ExecdBinary(t testing.TB) string {
	t.Helper()
	execdOnce.Do(func() {
		dir, err := os.MkdirTemp("", "hybox-execd-")
		if err != nil {
			execdErr = err
			return
		}
		execdPath = filepath.Join(dir, "hybox-execd")
		cmd := exec.Command("go", "build", "-trimpath", "-o", execdPath, "github.com/hybox-dev/hybox/cmd/hybox-execd")
		cmd.Dir = RepoRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		execdOut, execdErr = cmd.CombinedOutput()
	})
	if execdErr != nil {
		t.Fatalf("build hybox-execd: %v\n%s", execdErr, execdOut)
	}
	return execdPath
}
