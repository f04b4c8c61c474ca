package mounts_test

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/internal/mounts"
)

func needMounts(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("bind mounts are only made on Linux")
	}
	if ok, why := mounts.Supported(); !ok {
		t.Skipf("skipped: %s (run the tests as root)", why)
	}
}

func bindAt(t *testing.T, src, dst string, readOnly bool) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dst, 0o755))
	f, err := os.Open(dst)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, mounts.Bind(src, f, readOnly))
	t.Cleanup(func() { _ = mounts.Detach(dst) })
}

// Removing a directory with volumes mounted below it detaches them first:
// the volumes' files are all still there, and the directory is gone.
func TestRemoveAllLeavesVolumes(t *testing.T) {
	needMounts(t)
	vol := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(vol, "keep.txt"), []byte("mine"), 0o644))
	ws := filepath.Join(t.TempDir(), "with space", "ws")
	bindAt(t, vol, filepath.Join(ws, "mnt", "a"), false)
	bindAt(t, vol, filepath.Join(ws, "mnt", "a", "nested"), true)
	got, err := mounts.Under(ws)
	require.NoError(t, err)
	require.Len(t, got, 2, "both mounts are listed, the name with a space unescaped")
	assert.Equal(t, filepath.Join(ws, "mnt", "a", "nested"), got[0], "deepest first")
	ok, err := mounts.IsMountPoint(filepath.Join(ws, "mnt", "a"))
	require.NoError(t, err)
	assert.True(t, ok)
	ok, err = mounts.IsMountPoint(filepath.Join(ws, "mnt"))
	require.NoError(t, err)
	assert.False(t, ok)

	// Through the mount the volume's files are there, and the read-only one
	// refuses writes.
	b, err := os.ReadFile(filepath.Join(ws, "mnt", "a", "keep.txt"))
	require.NoError(t, err)
	assert.Equal(t, "mine", string(b))
	err = os.WriteFile(filepath.Join(ws, "mnt", "a", "nested", "no.txt"), nil, 0o644)
	require.Error(t, err, "a read-only mount refuses writes")

	require.NoError(t, mounts.RemoveAll(ws))
	_, err = os.Stat(ws)
	assert.True(t, os.IsNotExist(err), "the directory is removed")
	b, err = os.ReadFile(filepath.Join(vol, "keep.txt"))
	require.NoError(t, err, "the volume's files are untouched")
	assert.Equal(t, "mine", string(b))
	got, err = mounts.Under(filepath.Dir(ws))
	require.NoError(t, err)
	assert.Empty(t, got, "nothing is left mounted")
}

// A missing directory is nothing to do; one without mounts is removed
// like os.RemoveAll does.
func TestRemoveAllPlain(t *testing.T) {
	require.NoError(t, mounts.RemoveAll(filepath.Join(t.TempDir(), "none")))
	d := filepath.Join(t.TempDir(), "d")
	require.NoError(t, os.MkdirAll(filepath.Join(d, "x", "y"), 0o755))
	require.NoError(t, mounts.RemoveAll(d))
	_, err := os.Stat(d)
	assert.True(t, os.IsNotExist(err))
}
