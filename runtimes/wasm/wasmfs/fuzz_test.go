package wasmfs

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
)

// FuzzNoEscape feeds arbitrary paths and symlink targets to the filesystem
// and checks that nothing outside the root is ever opened, stat-ed, created
// or listed. The root holds links out of it made by the host.
func FuzzNoEscape(f *testing.F) {
	for _, seed := range []struct{ path, target string }{
		{"../outside/secret.txt", "x"},
		{"ws/out/secret.txt", "../outside"},
		{"ws/l/secret.txt", "/"},
		{"l/../../outside/secret.txt", "."},
		{"ws/abs/secret.txt", "../../outside/secret.txt"},
		{"ws/../ws/./rel/secret.txt", "ws/rel"},
		{"l/outside/secret.txt", ".."},
		{"l", "../outside/new.txt"},
		{"/../outside", "//outside"},
	} {
		f.Add(seed.path, seed.target)
	}
	f.Fuzz(func(t *testing.T, path, target string) {
		root, dir, outside := testRoot(t)
		fsys := New(root)
		if err := os.Mkdir(filepath.Join(dir, "ws"), 0o755); err != nil {
			t.Fatal(err)
		}
		for link, to := range map[string]string{"ws/abs": outside, "ws/rel": "../../outside", "ws/out": "../outside"} {
			if err := os.Symlink(to, filepath.Join(dir, link)); err != nil {
				t.Fatal(err)
			}
		}
		secret, err := os.Stat(filepath.Join(outside, "secret.txt"))
		if err != nil {
			t.Fatal(err)
		}
		outsideInfo, err := os.Stat(outside)
		if err != nil {
			t.Fatal(err)
		}
		escaped := func(ino uint64) bool {
			return ino == secret.Sys().(*syscall.Stat_t).Ino || ino == outsideInfo.Sys().(*syscall.Stat_t).Ino
		}

		_ = fsys.Symlink(target, "l") // any target may be stored
		_ = fsys.Symlink(target, path)
		for _, flag := range []experimentalsys.Oflag{
			experimentalsys.O_RDONLY,
			experimentalsys.O_RDONLY | experimentalsys.O_DIRECTORY,
			experimentalsys.O_RDWR | experimentalsys.O_CREAT,
		} {
			if file, errno := fsys.OpenFile(path, flag, 0o644); errno == 0 {
				ino, _ := file.Ino()
				file.Close()
				if escaped(ino) {
					t.Fatalf("OpenFile(%q) opened something outside", path)
				}
			}
		}
		if st, errno := fsys.Stat(path); errno == 0 && escaped(st.Ino) {
			t.Fatalf("Stat(%q) reached outside", path)
		}
		_ = fsys.Mkdir(path, 0o755)
		_ = fsys.Chmod(path, 0o777)
		_ = fsys.Utimens(path, 0, 0)
		_ = fsys.Rename("ws", path)

		ents, err := os.ReadDir(outside)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != 1 {
			t.Fatalf("outside changed: %v", ents)
		}
		after, err := os.Stat(filepath.Join(outside, "secret.txt"))
		if err != nil || after.Mode() != secret.Mode() || !after.ModTime().Equal(secret.ModTime()) {
			t.Fatalf("secret changed: %v", err)
		}
		if fi, err := os.Stat(outside); err != nil || fi.Mode() != outsideInfo.Mode() || !fi.ModTime().Equal(outsideInfo.ModTime()) {
			t.Fatalf("outside dir changed: %v", err)
		}
	})
}
