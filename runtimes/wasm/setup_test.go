package wasm_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hybox-dev/hybox/runtimes/wasm"
	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
	"github.com/hybox-dev/hybox/runtimes/wasm/wasmtest"
)

// TestSetupChoosesPython: the source build when its manifest is there and
// its files are intact; the npm build otherwise, saying why.
func TestSetupChoosesPython(t *testing.T) {
	src := wasmtest.GuestDir(t)
	b := wasmtest.PythonBuild(t)
	cases := []struct {
		name     string
		files    []string
		manifest func([]byte) []byte
		want     string
	}{
		{name: "source build", files: []string{engine.PythonManifest, b.Wasm.Name, b.Stdlib.Name}, want: "Debian source"},
		{name: "no manifest", want: "npm"},
		{name: "corrupt module", files: []string{b.Wasm.Name, b.Stdlib.Name},
			manifest: func(m []byte) []byte {
				return []byte(strings.Replace(string(m), b.Wasm.SHA256, strings.Repeat("0", 64), 1))
			},
			want: "source build is unavailable"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range append(c.files, engine.Python.Name, engine.QuickJS.Name) {
				if err := os.Symlink(filepath.Join(src, f), filepath.Join(dir, f)); err != nil {
					t.Fatal(err)
				}
			}
			if c.manifest != nil {
				m, err := os.ReadFile(filepath.Join(src, engine.PythonManifest))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, engine.PythonManifest), c.manifest(m), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			ctx := context.Background()
			eng, err := engine.New(ctx, engine.Options{GuestDir: dir, CacheDir: filepath.Join(wasmtest.RepoRoot(t), "build", "wazero-cache")})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = eng.Close(ctx) })
			rt, stop, err := wasm.Setup(ctx, wasm.SetupOptions{Engine: eng, PythonPool: -1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = stop() })
			if got := rt.PythonGuest(); !strings.Contains(got, c.want) {
				t.Errorf("PythonGuest() = %q, want it to mention %q", got, c.want)
			}
		})
	}
}
