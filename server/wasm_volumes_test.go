package server

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/internal/mounts"
	"github.com/hybox-dev/hybox/runtimes/oci/ocitest"
)

func needRootMounts(t *testing.T) {
	t.Helper()
	if ok, why := mounts.Supported(); !ok {
		t.Skipf("skipped: wasm volumes are bind mounts and %s (run the tests as root)", why)
	}
}

func hostVol(mount, path string, extra map[string]any) map[string]any {
	v := map[string]any{"name": "h", "mountPath": mount, "host": map[string]string{"path": path}}
	for k, x := range extra {
		v[k] = x
	}
	return v
}

// TestWasmVolumes: host and named volumes in a wasm sandbox, seen alike by
// the shell, Python, JavaScript and the files API; read-only and subPath
// honoured; symbolic links confined to the guest's "/"; kept across a
// restart and a fork; and deleting the sandbox removes its workspace but
// nothing of the volumes.
func TestWasmVolumes(t *testing.T) {
	needRootMounts(t)
	host := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(host, "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(host, "seed.txt"), []byte("from the host\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(host, "sub", "only-sub.txt"), []byte("sub\n"), 0o644))
	require.NoError(t, os.Symlink("/", filepath.Join(host, "to-root")))
	dataDir := t.TempDir()
	ho := harnessOpts{allowedHostPaths: []string{host}}
	h := newHarness(t, dataDir, ho)
	sb := h.create(map[string]any{"timeout": 3600, "volumes": []map[string]any{
		hostVol("/mnt/logs", host, nil),
		hostVol("/ro", host, map[string]any{"name": "ro", "readOnly": true, "subPath": "sub"}),
		pvc("shared", "/shared", nil),
	}})

	// The shell.
	o := h.command(sb.ID, "cat /mnt/logs/seed.txt && ls /ro && echo shell > /mnt/logs/shell.txt && echo pvc > /shared/p.txt")
	require.Nil(t, o.err, "%+v", o)
	assert.Equal(t, "from the host\nonly-sub.txt", lines(o))
	// A read-only volume refuses writes, in the shell as in Python.
	o = h.command(sb.ID, "echo no > /ro/no.txt")
	require.NotNil(t, o.err)
	assert.Contains(t, strings.ToLower(strings.Join(o.stderr, "")), "read-only file system")
	assert.Equal(t, "(True, 'from the host\\n')", h.result(sb.ID, "python",
		"import errno\ntry:\n    open('/ro/x', 'w')\nexcept OSError as e:\n    code = e.errno\nopen('/mnt/logs/py.txt', 'w').write('py')\n(code == errno.EROFS, open('/mnt/logs/seed.txt').read())"))
	assert.Equal(t, "'sub\\n'", h.result(sb.ID, "javascript",
		"require('fs').writeFileSync('/mnt/logs/js.txt', 'js'); require('fs').readFileSync('/ro/only-sub.txt', 'utf8')"))
	// The files API.
	st, b := h.execd(sb.ID, "GET", "/files/download?path=/mnt/logs/seed.txt", nil)
	require.Equal(t, http.StatusOK, st, string(b))
	assert.Equal(t, "from the host\n", string(b))
	st, b = h.upload(sb.ID, `{"path":"/mnt/logs/up.txt"}`, "uploaded")
	require.Equal(t, http.StatusOK, st, string(b))
	st, b = h.upload(sb.ID, `{"path":"/ro/up.txt"}`, "refused")
	assert.Equal(t, http.StatusForbidden, st, "a read-only volume refuses an upload")
	assert.Contains(t, string(b), "read-only file system")
	for name, want := range map[string]string{"shell.txt": "shell\n", "py.txt": "py", "js.txt": "js", "up.txt": "uploaded"} {
		got, err := os.ReadFile(filepath.Join(host, name))
		require.NoError(t, err, name)
		assert.Equal(t, want, string(got), name)
	}
	got, err := os.ReadFile(filepath.Join(dataDir, "volumes", "shared", "p.txt"))
	require.NoError(t, err)
	assert.Equal(t, "pvc\n", string(got))
	// A link in the volume to "/" is the guest's "/": its /etc, not the host's.
	o = h.command(sb.ID, "cat /mnt/logs/to-root/etc/os-release")
	require.Nil(t, o.err, "%+v", o)
	assert.Contains(t, strings.Join(o.stdout, ""), "hybox")

	// A fork mounts the same volumes and copies none of their files.
	f := h.fork(sb.ID, map[string]any{})[0]
	assert.Equal(t, "from the host", lines(h.command(f.ID, "cat /mnt/logs/seed.txt")))
	h.command(f.ID, "echo fork > /mnt/logs/fork.txt")
	assert.Equal(t, "fork", lines(h.command(sb.ID, "cat /mnt/logs/fork.txt")), "both see one volume")
	forkWS := filepath.Join(dataDir, "sandboxes", f.ID, "fs", "mnt", "logs")
	ok, err := mounts.IsMountPoint(forkWS)
	require.NoError(t, err)
	assert.True(t, ok, "the fork's volume is a mount, not a copy")

	// A restart detaches the volumes and mounts them again.
	h.close()
	left, err := mounts.Under(dataDir)
	require.NoError(t, err)
	assert.Empty(t, left, "a stopped server leaves nothing mounted")
	// As after kill -9: the volume is still mounted when the server
	// starts (it is not mounted twice), and a directory the server has no
	// record of, with a volume mounted in it, is removed without a file of
	// the volume.
	bind := func(src, dst string) {
		require.NoError(t, os.MkdirAll(dst, 0o755))
		d, err := os.Open(dst)
		require.NoError(t, err)
		defer d.Close()
		require.NoError(t, mounts.Bind(src, d, false))
	}
	bind(host, filepath.Join(dataDir, "sandboxes", sb.ID, "fs", "mnt", "logs"))
	orphan := filepath.Join(dataDir, "sandboxes", "orphan-of-a-crash", "fs", "mnt")
	bind(host, orphan)
	h = newHarness(t, dataDir, ho)
	left, err = mounts.Under(dataDir)
	require.NoError(t, err)
	assert.Len(t, left, 6, "the three volumes of the sandbox and of its fork, each mounted once: %v", left)
	_, err = os.Stat(filepath.Dir(filepath.Dir(orphan)))
	assert.True(t, os.IsNotExist(err), "the orphan directory is gone")
	assert.Equal(t, "from the host\nshell", lines(h.command(sb.ID, "cat /mnt/logs/seed.txt /mnt/logs/shell.txt")))
	assert.Equal(t, "pvc", lines(h.command(sb.ID, "cat /shared/p.txt")))

	// Deleting the sandboxes removes their workspaces, not the volumes' files.
	for _, id := range []string{sb.ID, f.ID} {
		st, _, _ := h.do("DELETE", "/v1/sandboxes/"+id, nil)
		require.Equal(t, http.StatusNoContent, st)
	}
	left, err = mounts.Under(dataDir)
	require.NoError(t, err)
	assert.Empty(t, left)
	for _, name := range []string{"seed.txt", "shell.txt", "fork.txt", "sub/only-sub.txt"} {
		_, err := os.Stat(filepath.Join(host, name))
		assert.NoError(t, err, "%s is still on the host", name)
	}
	_, err = os.Stat(filepath.Join(dataDir, "volumes", "shared", "p.txt"))
	assert.NoError(t, err, "the named volume keeps its files")
}

// TestWasmVolumesBadInput: what a wasm sandbox cannot mount is a 400
// naming the volume and the reason, and nothing is left of the create.
func TestWasmVolumesBadInput(t *testing.T) {
	needRootMounts(t)
	host := t.TempDir()
	outside := t.TempDir()
	dataDir := t.TempDir()
	h := newHarness(t, dataDir, harnessOpts{allowedHostPaths: []string{host}})
	for _, tc := range []struct {
		name string
		vol  map[string]any
		want string
	}{
		{"outside the allowed paths", hostVol("/m", outside, nil), "is not under an allowed host path"},
		{"missing", hostVol("/m", filepath.Join(host, "none"), nil), "no such file or directory"},
		{"subPath climbing out", hostVol("/m", host, map[string]any{"subPath": "../x"}), "must be relative and stay below hostPath"},
		{"over the system files", hostVol("/etc", host, nil), "mountPath /etc is reserved"},
		{"below the system files", hostVol("/proc/x", host, nil), "mountPath /proc/x is reserved"},
		{"over the root", hostVol("/", host, nil), "mountPath / is reserved"},
		{"relative mountPath", hostVol("m", host, nil), "mountPath must be an absolute path"},
		{"pvc subPath climbing out", map[string]any{"name": "p", "mountPath": "/p", "subPath": "../..", "pvc": map[string]any{"claimName": "w"}}, "must be relative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, b, _ := h.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]string{"uri": "wasm://default"}, "volumes": []map[string]any{tc.vol}})
			assert.Equal(t, http.StatusBadRequest, st, string(b))
			assert.Contains(t, string(b), tc.want)
		})
	}
	st, _ := h.volume("w")
	assert.Equal(t, http.StatusNotFound, st, "a refused create made no volume")
	ents, err := os.ReadDir(filepath.Join(dataDir, "sandboxes"))
	if err == nil {
		assert.Empty(t, ents, "a refused create leaves no directory")
	}
	left, err := mounts.Under(dataDir)
	require.NoError(t, err)
	assert.Empty(t, left)
}

// TestVolumeSharedAcrossTiers: one named volume mounted by a wasm sandbox
// and a container at once.
func TestVolumeSharedAcrossTiers(t *testing.T) {
	needRootMounts(t)
	h := newHarness(t, "", harnessOpts{containers: true})
	w := h.create(map[string]any{"volumes": []map[string]any{pvc("both", "/data", nil)}})
	t.Cleanup(func() { h.do("DELETE", "/v1/sandboxes/"+w.ID, nil) })
	c := h.create(map[string]any{"image": map[string]string{"uri": ocitest.ImageName},
		"extensions": map[string]string{"hybox.io/runtime": "runc"}, "entrypoint": []string{"sleep", "infinity"},
		"volumes": []map[string]any{pvc("both", "/mnt/both", nil)}})
	t.Cleanup(func() { h.do("DELETE", "/v1/sandboxes/"+c.ID, nil) })
	h.command(w.ID, "echo from-wasm > /data/w.txt")
	assert.Equal(t, "from-wasm", lines(h.command(c.ID, "cat /mnt/both/w.txt")))
	h.command(c.ID, "echo from-container > /mnt/both/c.txt")
	assert.Equal(t, "'from-container\\n'", h.result(w.ID, "python", "open('/data/c.txt').read()"))
	st, v := h.volume("both")
	require.Equal(t, http.StatusOK, st)
	assert.ElementsMatch(t, []string{w.ID, c.ID}, v.UsedBy)
}

// TestWasmVolumesPerCallWorkspace: per-call workspace isolation puts the
// workspace back after each execution, but a volume is shared storage and
// keeps what was written to it.
func TestWasmVolumesPerCallWorkspace(t *testing.T) {
	needRootMounts(t)
	host := t.TempDir()
	h := newHarness(t, "", harnessOpts{allowedHostPaths: []string{host}})
	sb := h.create(map[string]any{"extensions": map[string]string{"hybox.io/isolation": "per-call+workspace"},
		"volumes": []map[string]any{hostVol("/workspace/out", host, nil)}})
	h.code(sb.ID, "python", "open('/workspace/scratch.txt', 'w').write('gone'); open('/workspace/out/kept.txt', 'w').write('kept')")
	assert.Equal(t, "(False, 'kept')", h.result(sb.ID, "python",
		"import os\n(os.path.exists('/workspace/scratch.txt'), open('/workspace/out/kept.txt').read())"))
	got, err := os.ReadFile(filepath.Join(host, "kept.txt"))
	require.NoError(t, err)
	assert.Equal(t, "kept", string(got))
}
