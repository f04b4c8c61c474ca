package wasmfs

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
)

// testRoot makes <tmp>/root (returned as an os.Root and its host path) and
// <tmp>/outside/secret.txt, a file the filesystem must never reach.
func testRoot(t *testing.T) (*os.Root, string, string) {
	t.Helper()
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "root")
	outside := filepath.Join(tmp, "outside")
	for _, d := range []string{dir, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("SECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return root, dir, outside
}

func writeHost(t *testing.T, dir, name, data string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustOpen(t *testing.T, fsys experimentalsys.FS, path string, flag experimentalsys.Oflag) experimentalsys.File {
	t.Helper()
	f, errno := fsys.OpenFile(path, flag, 0o644)
	if errno != 0 {
		t.Fatalf("OpenFile(%q, %v): %v", path, flag, errno)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func noErr(t *testing.T, what string, errno experimentalsys.Errno) {
	t.Helper()
	if errno != 0 {
		t.Fatalf("%s: %v", what, errno)
	}
}

func wantErrno(t *testing.T, what string, got, want experimentalsys.Errno) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: errno %v, want %v", what, got, want)
	}
}

func TestReadWriteSeek(t *testing.T) {
	root, dir, _ := testRoot(t)
	fsys := New(root)

	f := mustOpen(t, fsys, "a.txt", experimentalsys.O_RDWR|experimentalsys.O_CREAT|experimentalsys.O_EXCL)
	n, errno := f.Write([]byte("hello world"))
	noErr(t, "Write", errno)
	if n != 11 {
		t.Fatalf("Write n=%d", n)
	}
	off, errno := f.Seek(0, io.SeekStart)
	noErr(t, "Seek", errno)
	if off != 0 {
		t.Fatalf("Seek=%d", off)
	}
	buf := make([]byte, 5)
	n, errno = f.Read(buf)
	noErr(t, "Read", errno)
	if got := string(buf[:n]); got != "hello" {
		t.Fatalf("Read=%q", got)
	}
	n, errno = f.Pread(buf, 6)
	noErr(t, "Pread", errno)
	if got := string(buf[:n]); got != "world" {
		t.Fatalf("Pread=%q", got)
	}
	_, errno = f.Pwrite([]byte("W"), 6)
	noErr(t, "Pwrite", errno)
	off, errno = f.Seek(-5, io.SeekEnd)
	noErr(t, "Seek end", errno)
	if off != 6 {
		t.Fatalf("Seek end=%d", off)
	}
	_, errno = f.Seek(0, 7)
	wantErrno(t, "Seek bad whence", errno, experimentalsys.EINVAL)
	_, errno = f.Pread(buf, -1)
	wantErrno(t, "Pread negative", errno, experimentalsys.EINVAL)
	noErr(t, "Truncate", f.Truncate(8))
	wantErrno(t, "Truncate negative", f.Truncate(-1), experimentalsys.EINVAL)
	st, errno := f.Stat()
	noErr(t, "Stat", errno)
	if st.Size != 8 || st.Ino == 0 || !st.Mode.IsRegular() {
		t.Fatalf("Stat=%+v", st)
	}
	if ino, _ := f.Ino(); ino != st.Ino {
		t.Fatalf("Ino=%d, Stat.Ino=%d", ino, st.Ino)
	}
	if dev, _ := f.Dev(); dev != st.Dev {
		t.Fatalf("Dev=%d, Stat.Dev=%d", dev, st.Dev)
	}
	noErr(t, "Sync", f.Sync())
	noErr(t, "Datasync", f.Datasync())
	noErr(t, "Close", f.Close())
	noErr(t, "Close twice", f.Close())
	_, errno = f.Read(buf)
	wantErrno(t, "Read after close", errno, experimentalsys.EBADF)

	b, err := os.ReadFile(filepath.Join(dir, "a.txt"))
	if err != nil || string(b) != "hello Wo" {
		t.Fatalf("host sees %q, %v", b, err)
	}
}

func TestOpenFlags(t *testing.T) {
	root, dir, _ := testRoot(t)
	fsys := New(root)
	if err := os.WriteFile(filepath.Join(dir, "file"), []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("file", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		path string
		flag experimentalsys.Oflag
		want experimentalsys.Errno
	}{
		{"read file", "file", experimentalsys.O_RDONLY, 0},
		{"root dot", ".", experimentalsys.O_RDONLY, 0},
		{"root empty", "", experimentalsys.O_RDONLY, 0},
		{"missing", "nope", experimentalsys.O_RDONLY, experimentalsys.ENOENT},
		{"excl on existing", "file", experimentalsys.O_WRONLY | experimentalsys.O_CREAT | experimentalsys.O_EXCL, experimentalsys.EEXIST},
		{"excl on symlink", "link", experimentalsys.O_WRONLY | experimentalsys.O_CREAT | experimentalsys.O_EXCL, experimentalsys.EEXIST},
		{"directory flag on file", "file", experimentalsys.O_DIRECTORY, experimentalsys.ENOTDIR},
		{"directory flag on dir", "dir", experimentalsys.O_DIRECTORY, 0},
		{"trailing slash on dir", "dir/", experimentalsys.O_RDONLY, 0},
		{"trailing slash on file", "file/", experimentalsys.O_RDONLY, experimentalsys.ENOTDIR},
		{"directory writable", "dir", experimentalsys.O_DIRECTORY | experimentalsys.O_RDWR, experimentalsys.EISDIR},
		{"dir writable", "dir", experimentalsys.O_WRONLY, experimentalsys.EISDIR},
		{"follow link", "link", experimentalsys.O_RDONLY, 0},
		{"nofollow link", "link", experimentalsys.O_RDONLY | experimentalsys.O_NOFOLLOW, experimentalsys.ELOOP},
		{"nofollow file", "file", experimentalsys.O_RDONLY | experimentalsys.O_NOFOLLOW, 0},
		{"create in missing dir", "nodir/x", experimentalsys.O_WRONLY | experimentalsys.O_CREAT, experimentalsys.ENOENT},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, errno := fsys.OpenFile(tc.path, tc.flag, 0o644)
			if errno == 0 {
				f.Close()
			}
			wantErrno(t, tc.path, errno, tc.want)
		})
	}

	t.Run("trunc", func(t *testing.T) {
		f := mustOpen(t, fsys, "file", experimentalsys.O_WRONLY|experimentalsys.O_TRUNC)
		st, errno := f.Stat()
		noErr(t, "Stat", errno)
		if st.Size != 0 {
			t.Fatalf("size after O_TRUNC = %d", st.Size)
		}
	})
	t.Run("read-only refuses write", func(t *testing.T) {
		f := mustOpen(t, fsys, "file", experimentalsys.O_RDONLY)
		_, errno := f.Write([]byte("x"))
		wantErrno(t, "Write", errno, experimentalsys.EBADF)
	})
	t.Run("directory refuses file ops", func(t *testing.T) {
		d := mustOpen(t, fsys, "dir", experimentalsys.O_RDONLY)
		_, errno := d.Read(make([]byte, 1))
		wantErrno(t, "Read", errno, experimentalsys.EISDIR)
		_, errno = d.Write([]byte("x"))
		wantErrno(t, "Write", errno, experimentalsys.EISDIR)
		wantErrno(t, "Truncate", d.Truncate(0), experimentalsys.EISDIR)
		_, errno = d.Seek(1, io.SeekStart)
		wantErrno(t, "Seek", errno, experimentalsys.EISDIR)
		if isDir, errno := d.IsDir(); errno != 0 || !isDir {
			t.Fatalf("IsDir=%v,%v", isDir, errno)
		}
		f := mustOpen(t, fsys, "file", experimentalsys.O_RDONLY)
		_, errno = f.Readdir(-1)
		wantErrno(t, "Readdir on file", errno, experimentalsys.EBADF)
	})
}

func TestAppend(t *testing.T) {
	root, dir, _ := testRoot(t)
	fsys := New(root)
	host := filepath.Join(dir, "log")
	if err := os.WriteFile(host, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := mustOpen(t, fsys, "log", experimentalsys.O_WRONLY|experimentalsys.O_APPEND)
	if !f.IsAppend() {
		t.Fatal("IsAppend false after O_APPEND")
	}
	if _, errno := f.Write([]byte("d")); errno != 0 {
		t.Fatal(errno)
	}
	noErr(t, "SetAppend(false)", f.SetAppend(false))
	if f.IsAppend() {
		t.Fatal("IsAppend true after SetAppend(false)")
	}
	if _, errno := f.Seek(0, io.SeekStart); errno != 0 {
		t.Fatal(errno)
	}
	if _, errno := f.Write([]byte("X")); errno != 0 {
		t.Fatal(errno)
	}
	// Pwrite works even though os.File refuses WriteAt after O_APPEND.
	if _, errno := f.Pwrite([]byte("Y"), 1); errno != 0 {
		t.Fatal(errno)
	}
	noErr(t, "SetAppend(true)", f.SetAppend(true))
	if _, errno := f.Write([]byte("e")); errno != 0 {
		t.Fatal(errno)
	}
	b, _ := os.ReadFile(host)
	if string(b) != "XYcde" {
		t.Fatalf("file = %q, want XYcde", b)
	}
}

func TestReaddir(t *testing.T) {
	root, dir, _ := testRoot(t)
	fsys := New(root)
	const files = 150
	want := map[string]fs.FileMode{"sub": fs.ModeDir, "ln": fs.ModeSymlink}
	for i := range files {
		name := fmt.Sprintf("f%03d", i)
		want[name] = 0
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(dir, "ln")); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		page int
	}{
		{"pages of 7", 7},
		{"pages of 1", 1},
		{"all at once", -1},
		{"page larger than dir", 1000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := mustOpen(t, fsys, ".", experimentalsys.O_RDONLY|experimentalsys.O_DIRECTORY)
			for pass := range 2 { // the second pass checks the rewind
				got := map[string]fs.FileMode{}
				for {
					ents, errno := d.Readdir(tc.page)
					noErr(t, "Readdir", errno)
					for _, e := range ents {
						if _, dup := got[e.Name]; dup {
							t.Fatalf("pass %d: %q returned twice", pass, e.Name)
						}
						if e.Ino == 0 {
							t.Fatalf("%q has no inode", e.Name)
						}
						got[e.Name] = e.Type
					}
					if tc.page <= 0 || len(ents) < tc.page {
						break
					}
				}
				if len(got) != len(want) {
					t.Fatalf("pass %d: %d entries, want %d", pass, len(got), len(want))
				}
				for name, typ := range want {
					if gt, ok := got[name]; !ok || gt != typ {
						t.Fatalf("pass %d: %q type %v (present %v), want %v", pass, name, gt, ok, typ)
					}
				}
				if _, errno := d.Seek(0, io.SeekStart); errno != 0 {
					t.Fatal(errno)
				}
			}
			// At the end, a further read returns nothing and no error.
			for {
				ents, errno := d.Readdir(64)
				noErr(t, "Readdir", errno)
				if len(ents) < 64 {
					break
				}
			}
			ents, errno := d.Readdir(64)
			if errno != 0 || len(ents) != 0 {
				t.Fatalf("Readdir at end: %d entries, %v", len(ents), errno)
			}
		})
	}
}

func TestPathOps(t *testing.T) {
	root, dir, _ := testRoot(t)
	fsys := New(root)
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	noErr(t, "Mkdir", fsys.Mkdir("d", 0o755))
	wantErrno(t, "Mkdir existing", fsys.Mkdir("d", 0o755), experimentalsys.EEXIST)
	wantErrno(t, "Mkdir missing parent", fsys.Mkdir("x/y", 0o755), experimentalsys.ENOENT)
	noErr(t, "Mkdir nested", fsys.Mkdir("d/e", 0o755))
	write("d/e/f", "f")
	write("g", "g")

	wantErrno(t, "Rmdir non-empty", fsys.Rmdir("d"), experimentalsys.ENOTEMPTY)
	wantErrno(t, "Rmdir file", fsys.Rmdir("g"), experimentalsys.ENOTDIR)
	wantErrno(t, "Unlink dir", fsys.Unlink("d"), experimentalsys.EISDIR)
	wantErrno(t, "Unlink missing", fsys.Unlink("nope"), experimentalsys.ENOENT)
	if _, err := os.Stat(filepath.Join(dir, "g")); err != nil {
		t.Fatal("Rmdir on a file removed it")
	}

	// Rename: file over file, dir over empty dir, dir over non-empty dir.
	write("h", "h")
	noErr(t, "Rename file", fsys.Rename("h", "g"))
	if b, _ := os.ReadFile(filepath.Join(dir, "g")); string(b) != "h" {
		t.Fatalf("g = %q after rename", b)
	}
	noErr(t, "Rename same", fsys.Rename("g", "g"))
	wantErrno(t, "Rename missing", fsys.Rename("nope", "x"), experimentalsys.ENOENT)
	noErr(t, "Mkdir empty", fsys.Mkdir("empty", 0o755))
	wantErrno(t, "Rename file over dir", fsys.Rename("g", "empty"), experimentalsys.EISDIR)
	wantErrno(t, "Rename dir over non-empty", fsys.Rename("empty", "d"), experimentalsys.ENOTEMPTY)
	noErr(t, "Rename dir over empty dir", fsys.Rename("d/e", "empty"))
	if b, _ := os.ReadFile(filepath.Join(dir, "empty", "f")); string(b) != "f" {
		t.Fatalf("empty/f = %q after rename", b)
	}
	noErr(t, "Unlink", fsys.Unlink("empty/f"))
	noErr(t, "Rmdir", fsys.Rmdir("empty"))

	// Links.
	noErr(t, "Link", fsys.Link("g", "g2"))
	st1, _ := fsys.Stat("g")
	st2, _ := fsys.Stat("g2")
	if st1.Ino != st2.Ino || st1.Nlink != 2 {
		t.Fatalf("hard link: %+v vs %+v", st1, st2)
	}
	noErr(t, "Symlink", fsys.Symlink("g", "sl"))
	wantErrno(t, "Symlink existing", fsys.Symlink("g", "sl"), experimentalsys.EEXIST)
	target, errno := fsys.Readlink("sl")
	noErr(t, "Readlink", errno)
	if target != "g" {
		t.Fatalf("Readlink=%q", target)
	}
	lst, errno := fsys.Lstat("sl")
	noErr(t, "Lstat", errno)
	if lst.Mode.Type() != fs.ModeSymlink {
		t.Fatalf("Lstat mode %v", lst.Mode)
	}
	st, errno := fsys.Stat("sl")
	noErr(t, "Stat", errno)
	if st.Ino != st1.Ino || st.Size != 1 {
		t.Fatalf("Stat through link: %+v", st)
	}
	noErr(t, "Unlink symlink", fsys.Unlink("sl"))
	if _, err := os.Stat(filepath.Join(dir, "g")); err != nil {
		t.Fatal("unlinking a symlink removed its target")
	}

	// Chmod.
	noErr(t, "Chmod", fsys.Chmod("g", 0o600))
	if st, _ := fsys.Stat("g"); st.Mode.Perm() != 0o600 {
		t.Fatalf("mode %v after Chmod", st.Mode)
	}
	wantErrno(t, "Chmod missing", fsys.Chmod("nope", 0o600), experimentalsys.ENOENT)
}

func TestUtimens(t *testing.T) {
	root, _, _ := testRoot(t)
	fsys := New(root)
	f := mustOpen(t, fsys, "t", experimentalsys.O_RDWR|experimentalsys.O_CREAT)
	const (
		at = int64(1_000_000_000_123_456_789)
		mt = int64(1_200_000_000_987_654_321)
	)
	noErr(t, "Utimens", fsys.Utimens("t", at, mt))
	st, _ := fsys.Stat("t")
	if st.Atim != at || st.Mtim != mt {
		t.Fatalf("times %d/%d, want %d/%d", st.Atim, st.Mtim, at, mt)
	}
	noErr(t, "Utimens omit atime", fsys.Utimens("t", experimentalsys.UTIME_OMIT, mt+1))
	st, _ = fsys.Stat("t")
	if st.Atim != at || st.Mtim != mt+1 {
		t.Fatalf("omit atime: %d/%d", st.Atim, st.Mtim)
	}
	noErr(t, "File.Utimens omit mtime", f.Utimens(at+5, experimentalsys.UTIME_OMIT))
	st, _ = f.Stat()
	if st.Atim != at+5 || st.Mtim != mt+1 {
		t.Fatalf("file omit mtime: %d/%d", st.Atim, st.Mtim)
	}
	noErr(t, "both omitted", fsys.Utimens("t", experimentalsys.UTIME_OMIT, experimentalsys.UTIME_OMIT))
	wantErrno(t, "Utimens missing", fsys.Utimens("nope", at, mt), experimentalsys.ENOENT)
	if time.Unix(0, st.Mtim).Year() != 2008 {
		t.Fatalf("mtime year %d", time.Unix(0, st.Mtim).Year())
	}
}

// TestEscapes checks that no path, host-made symlink or guest-made symlink
// reaches <tmp>/outside.
func TestEscapes(t *testing.T) {
	root, dir, outside := testRoot(t)
	fsys := New(root)
	if err := os.Mkdir(filepath.Join(dir, "ws"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ws", "in.txt"), []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Host-made links out of the root, absolute and relative.
	if err := os.Symlink(outside, filepath.Join(dir, "ws", "hostabs")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../outside", filepath.Join(dir, "ws", "hostrel")); err != nil {
		t.Fatal(err)
	}
	// Guest-made links out of the root: creating them is allowed.
	for link, target := range map[string]string{
		"ws/gabs":  outside,
		"ws/getc":  "/etc",
		"ws/grel":  "../../outside",
		"ws/gfile": filepath.Join(outside, "secret.txt"),
		"ws/gdots": "../../../../../../../../..",
		// Dangling links whose targets would be created outside.
		"ws/gnew":    filepath.Join(outside, "created.txt"),
		"ws/gnewrel": "../../outside/created.txt",
	} {
		noErr(t, "Symlink "+link, fsys.Symlink(target, link))
	}
	// A chain: a link inside pointing at a link that escapes.
	noErr(t, "Symlink chain", fsys.Symlink("grel", "ws/chain"))

	paths := []string{
		"../outside/secret.txt",
		"ws/../../outside/secret.txt",
		"ws/hostabs/secret.txt", "ws/hostrel/secret.txt",
		"ws/gabs/secret.txt", "ws/grel/secret.txt", "ws/gfile",
		"ws/chain/secret.txt", "ws/gdots/etc/passwd", "ws/getc/passwd",
		"ws/gnew", "ws/gnewrel",
	}
	isLink := map[string]bool{"ws/gfile": true, "ws/gnew": true, "ws/gnewrel": true}
	for _, p := range paths {
		t.Run(p, func(t *testing.T) {
			if f, errno := fsys.OpenFile(p, experimentalsys.O_RDONLY, 0); errno == 0 {
				b := make([]byte, 64)
				n, _ := f.Read(b)
				f.Close()
				t.Fatalf("OpenFile succeeded, read %q", b[:n])
			}
			if _, errno := fsys.Stat(p); errno == 0 {
				t.Fatal("Stat succeeded")
			}
			if _, errno := fsys.Lstat(p); errno == 0 && !isLink[p] {
				t.Fatal("Lstat succeeded")
			}
			if f, errno := fsys.OpenFile(p, experimentalsys.O_WRONLY|experimentalsys.O_CREAT|experimentalsys.O_TRUNC, 0o644); errno == 0 {
				f.Close()
				t.Fatal("OpenFile for writing succeeded")
			}
			if errno := fsys.Chmod(p, 0o777); errno == 0 {
				t.Fatal("Chmod succeeded")
			}
			if errno := fsys.Utimens(p, 0, 0); errno == 0 {
				t.Fatal("Utimens succeeded")
			}
		})
	}
	for _, d := range []string{"ws/hostabs", "ws/hostrel", "ws/gabs", "ws/getc", "ws/grel", "ws/chain", "ws/gdots", ".."} {
		t.Run("dir "+d, func(t *testing.T) {
			if f, errno := fsys.OpenFile(d, experimentalsys.O_RDONLY|experimentalsys.O_DIRECTORY, 0); errno == 0 {
				ents, _ := f.Readdir(-1)
				f.Close()
				t.Fatalf("opened as a directory, %d entries", len(ents))
			}
			if errno := fsys.Mkdir(d+"/new", 0o755); errno == 0 {
				t.Fatal("Mkdir through link succeeded")
			}
			if errno := fsys.Rename("ws/in.txt", d+"/moved"); errno == 0 {
				t.Fatal("Rename through link succeeded")
			}
			if errno := fsys.Link("ws/in.txt", d+"/hard"); errno == 0 {
				t.Fatal("Link through link succeeded")
			}
			if errno := fsys.Symlink("x", d+"/sym"); errno == 0 {
				t.Fatal("Symlink through link succeeded")
			}
		})
	}
	// Escaping is reported as a permission error.
	_, errno := fsys.OpenFile("ws/gabs/secret.txt", experimentalsys.O_RDONLY, 0)
	wantErrno(t, "escape errno", errno, experimentalsys.EPERM)

	// The outside is untouched.
	ents, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	if len(names) != 1 || names[0] != "secret.txt" {
		t.Fatalf("outside now holds %v", names)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret.txt")); string(b) != "SECRET" {
		t.Fatalf("secret changed to %q", b)
	}
	// Links that stay inside work.
	noErr(t, "Symlink inside", fsys.Symlink("in.txt", "ws/inlink"))
	noErr(t, "Symlink inside up", fsys.Symlink("../ws", "ws/updir"))
	f := mustOpen(t, fsys, "ws/updir/inlink", experimentalsys.O_RDONLY)
	b := make([]byte, 16)
	n, _ := f.Read(b)
	if string(b[:n]) != "inside" {
		t.Fatalf("read through inside links: %q", b[:n])
	}
	// Readlink reports guest targets unchanged.
	if got, _ := fsys.Readlink("ws/getc"); got != "/etc" {
		t.Fatalf("Readlink=%q", got)
	}
}

func TestClosedRoot(t *testing.T) {
	root, _, _ := testRoot(t)
	fsys := New(root)
	root.Close()
	_, errno := fsys.OpenFile("x", experimentalsys.O_RDONLY, 0)
	wantErrno(t, "OpenFile", errno, experimentalsys.EBADF)
	_, errno = fsys.Stat(".")
	wantErrno(t, "Stat", errno, experimentalsys.EBADF)
}

func TestIsSystem(t *testing.T) {
	for name, want := range map[string]bool{
		"etc": true, "etc/passwd": true, "/etc/x/y": true, "./etc": true, "etc/": true,
		"proc": true, "proc/self/status": true,
		".": false, "etcetera": false, "tmp/etc": false, "workspace/etc/passwd": false, "": false, "process": false,
	} {
		if got := IsSystem(name); got != want {
			t.Errorf("IsSystem(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestSystemReadOnly checks that every call that would change the sandbox's
// /etc fails with EROFS while reads work.
func TestSystemReadOnly(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "etc", "passwd"), []byte("root:x:0:0::/:/bin/sh\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	fsys := New(root)
	f, errno := fsys.OpenFile("etc/passwd", experimentalsys.O_RDONLY, 0)
	if errno != 0 {
		t.Fatalf("read open: %v", errno)
	}
	f.Close()
	if _, errno := fsys.OpenFile("tmpfile", experimentalsys.O_CREAT|experimentalsys.O_WRONLY, 0o644); errno != 0 {
		t.Fatalf("create outside etc: %v", errno)
	}
	for name, call := range map[string]func() experimentalsys.Errno{
		"open write": func() experimentalsys.Errno {
			_, e := fsys.OpenFile("etc/passwd", experimentalsys.O_WRONLY, 0)
			return e
		},
		"open create": func() experimentalsys.Errno {
			_, e := fsys.OpenFile("etc/new", experimentalsys.O_CREAT|experimentalsys.O_RDONLY, 0o644)
			return e
		},
		"open trunc": func() experimentalsys.Errno {
			_, e := fsys.OpenFile("/etc/passwd", experimentalsys.O_TRUNC, 0)
			return e
		},
		"mkdir":       func() experimentalsys.Errno { return fsys.Mkdir("etc/d", 0o755) },
		"chmod":       func() experimentalsys.Errno { return fsys.Chmod("etc/passwd", 0o777) },
		"rename from": func() experimentalsys.Errno { return fsys.Rename("etc/passwd", "stolen") },
		"rename to":   func() experimentalsys.Errno { return fsys.Rename("tmpfile", "etc/passwd") },
		"rename dir":  func() experimentalsys.Errno { return fsys.Rename("etc", "etc2") },
		"rmdir":       func() experimentalsys.Errno { return fsys.Rmdir("etc") },
		"unlink":      func() experimentalsys.Errno { return fsys.Unlink("etc/passwd") },
		"link from":   func() experimentalsys.Errno { return fsys.Link("etc/passwd", "hard") },
		"link to":     func() experimentalsys.Errno { return fsys.Link("tmpfile", "etc/hard") },
		"symlink":     func() experimentalsys.Errno { return fsys.Symlink("/tmpfile", "etc/sym") },
		"utimens":     func() experimentalsys.Errno { return fsys.Utimens("etc/passwd", 0, 0) },
	} {
		if errno := call(); errno != experimentalsys.EROFS {
			t.Errorf("%s: errno %v, want EROFS", name, errno)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "etc", "passwd"))
	if err != nil || string(b) != "root:x:0:0::/:/bin/sh\n" {
		t.Errorf("passwd changed: %q %v", b, err)
	}
}
