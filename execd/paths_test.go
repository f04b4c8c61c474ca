package execd

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPathsGuestName(t *testing.T) {
	tests := []struct {
		name, in, want string
		bad            bool
	}{
		{name: "root", in: "/", want: "."},
		{name: "dot", in: ".", want: "."},
		{name: "absolute", in: "/tmp/a.txt", want: "tmp/a.txt"},
		{name: "relative is from root", in: "workspace/x", want: "workspace/x"},
		{name: "trailing slash", in: "/workspace/", want: "workspace"},
		{name: "double slashes and dots", in: "//a/./b//c/.", want: "a/b/c"},
		{name: "inner dotdot", in: "/a/b/../c", want: "a/c"},
		{name: "dotdot back to root", in: "/a/..", want: "."},
		{name: "dots in names", in: "/a/..b/...", want: "a/..b/..."},
		{name: "backslash is a name byte", in: `/a\..\b`, want: `a\..\b`},
		{name: "empty", in: "", bad: true},
		{name: "climb", in: "/..", bad: true},
		{name: "climb later", in: "/a/../../etc/passwd", bad: true},
		{name: "relative climb", in: "../x", bad: true},
		{name: "nul", in: "/a\x00b", bad: true},
		{name: "too long", in: "/" + strings.Repeat("a", maxGuestPath), bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := guestName(tt.in)
			if tt.bad {
				require.ErrorIs(t, err, errInvalidPath)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestPathsHelpers(t *testing.T) {
	assert.Equal(t, "/", guestPath("."))
	assert.Equal(t, "/a/b", guestPath("a/b"))
	assert.Equal(t, "a/b", joinName("a", "b"))
	assert.Equal(t, "b", joinName(".", "b"))
	assert.Equal(t, ".", parentName("a"))
	assert.Equal(t, "a/b", parentName("a/b/c"))
	assert.Equal(t, "c", baseName("a/b/c"))
	assert.Equal(t, "a", baseName("a"))
}

func TestPathsFsErr(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(dir+"/file", nil, 0o644))
	require.NoError(t, os.Mkdir(dir+"/sub", 0o755))
	require.NoError(t, os.Symlink("/etc", dir+"/abs"))
	require.NoError(t, os.Symlink("loop", dir+"/loop"))
	root, err := os.OpenRoot(dir + "/sub")
	require.NoError(t, err)
	defer root.Close()
	outer, err := os.OpenRoot(dir)
	require.NoError(t, err)
	defer outer.Close()

	tests := []struct {
		name   string
		err    func() error
		target error
	}{
		{"dotdot escape", func() error { _, err := root.Open("../file"); return err }, errInvalidPath},
		{"absolute symlink", func() error { _, err := outer.Open("abs/passwd"); return err }, errInvalidPath},
		{"missing", func() error { _, err := outer.Open("nope"); return err }, fs.ErrNotExist},
		{"not a directory", func() error { _, err := outer.Open("file/x"); return err }, fs.ErrNotExist},
		{"loop", func() error { _, err := outer.Open("loop"); return err }, errInvalidPath},
		{"non-empty", func() error { return outer.Remove(".") }, errFileKind},
		{"exists", func() error { return outer.Mkdir("sub", 0o755) }, fs.ErrExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := tt.err()
			require.Error(t, raw)
			got := fsErr("/guest/path", raw)
			assert.ErrorIs(t, got, tt.target, "raw: %v", raw)
			assert.Contains(t, got.Error(), "/guest/path")
			assert.NotContains(t, got.Error(), dir, "host paths must not leak")
		})
	}
	assert.NoError(t, fsErr("/x", nil))
	assert.False(t, isEscape(errors.New("other")))
}
