package pyguest

import (
	"bytes"
	"io"
	"io/fs"
	"path"
	"sort"
	"time"
)

// memFS is a read-only flat directory of files held in memory (the site
// files with the driver, and the stdlib zip), mounted into guests. Its
// files never change, so every guest can share one.
type memFS map[string][]byte

var _ fs.FS = memFS(nil)

// modTime is the fixed mtime of every file: Python's import caches compare
// directory mtimes, and a constant keeps a cloned interpreter's caches valid.
var modTime = time.Unix(1704067200, 0)

func (m memFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	if name == "." {
		names := make([]string, 0, len(m))
		for n := range m {
			names = append(names, n)
		}
		sort.Strings(names)
		return &memDir{fs: m, names: names}, nil
	}
	b, ok := m[name]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return &memFile{info: memInfo{name: name, size: int64(len(b))}, Reader: bytes.NewReader(b)}, nil
}

type memInfo struct {
	name string
	size int64
	dir  bool
}

func (i memInfo) Name() string { return path.Base(i.name) }
func (i memInfo) Size() int64  { return i.size }
func (i memInfo) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o555
	}
	return 0o444
}
func (i memInfo) ModTime() time.Time { return modTime }
func (i memInfo) IsDir() bool        { return i.dir }
func (i memInfo) Sys() any           { return nil }

// memFile is an open file; *bytes.Reader gives it Read, ReadAt and Seek.
type memFile struct {
	info memInfo
	*bytes.Reader
}

func (f *memFile) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *memFile) Close() error               { return nil }

type memDir struct {
	fs    memFS
	names []string
	pos   int
}

func (d *memDir) Stat() (fs.FileInfo, error) { return memInfo{name: ".", dir: true}, nil }
func (d *memDir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: ".", Err: fs.ErrInvalid}
}
func (d *memDir) Close() error { return nil }

func (d *memDir) ReadDir(n int) ([]fs.DirEntry, error) {
	rest := d.names[d.pos:]
	if n > 0 && len(rest) == 0 {
		return nil, io.EOF
	}
	if n > 0 && n < len(rest) {
		rest = rest[:n]
	}
	out := make([]fs.DirEntry, len(rest))
	for i, name := range rest {
		out[i] = fs.FileInfoToDirEntry(memInfo{name: name, size: int64(len(d.fs[name]))})
	}
	d.pos += len(rest)
	return out, nil
}
