package wasmfs

import (
	"io"
	"sync"
	"testing"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
)

func TestSwitchUnbound(t *testing.T) {
	s := NewSwitch()
	tests := []struct {
		name string
		call func() experimentalsys.Errno
	}{
		{"OpenFile", func() experimentalsys.Errno {
			_, e := s.OpenFile("x", experimentalsys.O_RDONLY, 0)
			return e
		}},
		{"OpenFile dot as directory", func() experimentalsys.Errno {
			_, e := s.OpenFile(".", experimentalsys.O_RDONLY|experimentalsys.O_DIRECTORY, 0)
			return e
		}},
		{"Lstat", func() experimentalsys.Errno { _, e := s.Lstat("."); return e }},
		{"Stat", func() experimentalsys.Errno { _, e := s.Stat("."); return e }},
		{"Mkdir", func() experimentalsys.Errno { return s.Mkdir("d", 0o755) }},
		{"Chmod", func() experimentalsys.Errno { return s.Chmod("d", 0o755) }},
		{"Rename", func() experimentalsys.Errno { return s.Rename("a", "b") }},
		{"Rmdir", func() experimentalsys.Errno { return s.Rmdir("d") }},
		{"Unlink", func() experimentalsys.Errno { return s.Unlink("d") }},
		{"Link", func() experimentalsys.Errno { return s.Link("a", "b") }},
		{"Symlink", func() experimentalsys.Errno { return s.Symlink("a", "b") }},
		{"Readlink", func() experimentalsys.Errno { _, e := s.Readlink("a"); return e }},
		{"Utimens", func() experimentalsys.Errno { return s.Utimens("a", 0, 0) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantErrno(t, tc.name, tc.call(), experimentalsys.EACCES)
		})
	}
	if s.Bound() {
		t.Fatal("Bound() before Bind")
	}
	var zero Switch
	_, errno := zero.Stat(".")
	wantErrno(t, "zero Switch", errno, experimentalsys.EACCES)
}

// TestSwitchPendingRoot covers the root directory handle wazero opens
// before Bind: it is a directory that refuses everything until Bind and then
// lists the bound root.
func TestSwitchPendingRoot(t *testing.T) {
	root, dir, _ := testRoot(t)
	s := NewSwitch()
	d, errno := s.OpenFile(".", experimentalsys.O_RDONLY, 0)
	noErr(t, "OpenFile(.)", errno)
	defer d.Close()
	if isDir, errno := d.IsDir(); errno != 0 || !isDir {
		t.Fatalf("IsDir=%v,%v", isDir, errno)
	}
	_, errno = d.Readdir(-1)
	wantErrno(t, "Readdir", errno, experimentalsys.EACCES)
	_, errno = d.Stat()
	wantErrno(t, "Stat", errno, experimentalsys.EACCES)
	_, errno = d.Ino()
	wantErrno(t, "Ino", errno, experimentalsys.EACCES)

	writeHost(t, dir, "one", "1")
	s.Bind(root)
	if !s.Bound() {
		t.Fatal("Bound() false after Bind")
	}
	ents, errno := d.Readdir(-1)
	noErr(t, "Readdir after Bind", errno)
	if len(ents) != 1 || ents[0].Name != "one" {
		t.Fatalf("Readdir=%v", ents)
	}
	_, errno = d.Seek(0, io.SeekStart)
	noErr(t, "Seek", errno)
	if ents, _ := d.Readdir(-1); len(ents) != 1 {
		t.Fatalf("after rewind: %v", ents)
	}
	st, errno := d.Stat()
	noErr(t, "Stat after Bind", errno)
	if !st.Mode.IsDir() {
		t.Fatalf("mode %v", st.Mode)
	}
	noErr(t, "Close", d.Close())
	_, errno = d.Stat()
	wantErrno(t, "Stat after Close", errno, experimentalsys.EBADF)
}

func TestSwitchBind(t *testing.T) {
	root, dir, _ := testRoot(t)
	writeHost(t, dir, "f", "data")
	s := NewSwitch()

	// Readers race with Bind; each sees either EACCES or the file.
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			<-start
			for range 200 {
				st, errno := s.Stat("f")
				switch {
				case errno == experimentalsys.EACCES:
				case errno == 0 && st.Size == 4:
				default:
					t.Errorf("Stat during Bind: %+v, %v", st, errno)
					return
				}
			}
		})
	}
	close(start)
	s.Bind(root)
	wg.Wait()

	f, errno := s.OpenFile("f", experimentalsys.O_RDONLY, 0)
	noErr(t, "OpenFile after Bind", errno)
	f.Close()

	for name, fn := range map[string]func(){
		"twice": func() { s.Bind(root) },
		"nil":   func() { NewSwitch().Bind(nil) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("Bind did not panic")
				}
			}()
			fn()
		})
	}
}

func TestNewNilRoot(t *testing.T) {
	_, errno := New(nil).Stat(".")
	wantErrno(t, "Stat", errno, experimentalsys.EACCES)
}

// TestStagedSwitch: before Bind, a staged Switch reports its directories
// and their parents as directories to Stat and Lstat and refuses all
// else, listing and creating included; after Bind the bound root answers
// (a staged directory it lacks is missing there).
func TestStagedSwitch(t *testing.T) {
	root, dir, _ := testRoot(t)
	writeHost(t, dir, "f", "data")
	s := NewStagedSwitch("/home/user/work")
	for _, p := range []string{".", "/", "home", "/home/user", "home/user/work/"} {
		st, errno := s.Stat(p)
		noErr(t, "Stat "+p, errno)
		if !st.Mode.IsDir() {
			t.Errorf("Stat %s: mode %v, want a directory", p, st.Mode)
		}
		if _, errno := s.Lstat(p); errno != 0 {
			t.Errorf("Lstat %s: %v", p, errno)
		}
	}
	for _, p := range []string{"home/other", "home/user/work/x", "f", "home/user/../other"} {
		_, errno := s.Stat(p)
		wantErrno(t, "Stat "+p, errno, experimentalsys.EACCES)
	}
	_, errno := s.OpenFile("home", experimentalsys.O_RDONLY|experimentalsys.O_DIRECTORY, 0)
	wantErrno(t, "OpenFile of a staged directory", errno, experimentalsys.EACCES)
	wantErrno(t, "Mkdir in a staged directory", s.Mkdir("home/user/work/d", 0o755), experimentalsys.EACCES)

	s.Bind(root)
	st, errno := s.Stat("f")
	noErr(t, "Stat f after Bind", errno)
	if st.Size != 4 {
		t.Errorf("Stat f after Bind: size %d", st.Size)
	}
	_, errno = s.Stat("home")
	wantErrno(t, "Stat of a staged directory the bound root lacks", errno, experimentalsys.ENOENT)
}
