// Package wasmtest locates test fixtures shared across packages: the pinned
// guest interpreters fetched by `make guests`, and a per-test wasm engine.
package wasmtest

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
)

// RepoRoot returns the directory holding go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test directory")
		}
		dir = parent
	}
}

// GuestDir returns the directory with python.wasm and quickjs.wasm
// ($HYBOX_GUEST_DIR or build/guests). The test fails, never skips, when the
// guests are missing: `make test` always fetches them first.
func GuestDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("HYBOX_GUEST_DIR")
	if dir == "" {
		dir = filepath.Join(RepoRoot(t), "build", "guests")
	}
	for _, g := range []engine.Guest{engine.Python, engine.QuickJS} {
		if _, err := os.Stat(filepath.Join(dir, g.Name)); err != nil {
			t.Fatalf("guest %s missing in %s: run `make guests` first", g.Name, dir)
		}
	}
	return dir
}

var (
	engOnce sync.Once
	eng     *engine.Engine
	engErr  error
)

// Engine returns a process-wide engine with the guests and a compilation
// cache under build/wazero-cache, shared by all tests of a package.
func Engine(t testing.TB) *engine.Engine {
	t.Helper()
	gd := GuestDir(t)
	engOnce.Do(func() {
		eng, engErr = engine.New(context.Background(), engine.Options{
			GuestDir: gd,
			CacheDir: filepath.Join(RepoRoot(t), "build", "wazero-cache"),
		})
	})
	if engErr != nil {
		t.Fatal(engErr)
	}
	return eng
}
