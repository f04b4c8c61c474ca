package wasm_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/runtimes/wasm"
	"github.com/hybox-dev/hybox/runtimes/wasm/wasmtest"
)

// shell runs src in the sandbox's shell and returns its status and output.
func shell(t *testing.T, be execd.Executor, src string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	p, err := be.StartCommand(context.Background(), execd.ProcessSpec{Command: src, Stdout: &out, Stderr: &out})
	require.NoError(t, err)
	code, err := p.Wait()
	require.NoError(t, err)
	return code, out.String()
}

// run runs code in a new context of language and returns its output.
func run(t *testing.T, be execd.Executor, language, code string) string {
	t.Helper()
	it, err := be.NewInterpreter(context.Background(), language, "")
	require.NoError(t, err)
	defer it.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var rec recorder
	xerr, err := it.Run(ctx, code, &rec)
	require.NoError(t, err)
	require.Nil(t, xerr, "%s: %+v", language, xerr)
	return rec.String()
}

// TestLooksLikeLinux checks the sandbox's /etc and /proc as its programs
// see them: written on first use, the shell, Python (files, pwd, grp) and
// JavaScript read the same files, none of them can change them, and a
// restore writes again those that changed.
func TestLooksLikeLinux(t *testing.T) {
	rt, stop, err := wasm.Setup(context.Background(), wasm.SetupOptions{Engine: wasmtest.Engine(t), PythonPool: 1, PythonReady: 2})
	require.NoError(t, err)
	t.Cleanup(func() { _ = stop() })
	spec := runtimes.Spec{ID: "sbx-linux", Image: "wasm://default", Dir: t.TempDir(), MemoryBytes: 64 << 20}
	sb, err := rt.Create(context.Background(), spec)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sb.Close(context.Background()) })
	be := sb.(execd.Executor)
	_, err = os.Stat(filepath.Join(spec.Dir, "fs", "etc"))
	assert.True(t, os.IsNotExist(err), "a sandbox nothing has used yet writes no system files")

	for _, c := range []struct {
		name, src string
		code      int
		out       string
	}{
		{"os-release", ". /etc/os-release && echo $ID $NAME", 0, "hybox hybox\n"},
		{"hostname", "cat /etc/hostname; hostname; uname -n", 0, "sbx-linux\nsbx-linux\nsbx-linux\n"},
		{"id", "id; whoami; id -un; id -u; id -g", 0, "uid=1000(user) gid=1000(user) groups=1000(user)\nuser\nuser\n1000\n1000\n"},
		{"id nobody", "id -u nobody; id -g nobody; id -gn nobody; id nobody", 0, "65534\n65534\nnogroup\nuid=65534(nobody) gid=65534(nogroup) groups=65534(nogroup)\n"},
		{"id root", "id root; id -u 0", 0, "uid=0(root) gid=0(root) groups=0(root)\n0\n"},
		{"id unknown", "id bob", 1, "id: ‘bob’: no such user\n"},
		{"id -n alone", "id -n", 1, "id: cannot print only names or real IDs in default format\n"},
		{"getent", "getent passwd nobody; getent group 0; getent passwd bob", 2, "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\nroot:x:0:\n"},
		{"groups", "groups; groups root", 0, "user\nroot : root\n"},
		{"resolv.conf", "grep -c nameserver /etc/resolv.conf; grep localhost /etc/hosts | head -n1", 0, "1\n127.0.0.1\tlocalhost\n"},
		{"write refused", "echo x > /etc/passwd", 1, "open /etc/passwd: Read-only file system\n"},
		{"rm refused", "rm /etc/hostname", 1, "rm: cannot remove '/etc/hostname': Read-only file system\n"},
		{"create refused", "touch /etc/new", 1, "touch: cannot touch '/etc/new': Read-only file system\n"},
		{"symlink into etc refused", "ln -s ../etc/passwd /tmp/p && echo x >> /tmp/p", 1, "open /tmp/p: Read-only file system\n"},
		{"test -w", "test -w /etc/passwd || echo ro; test -r /etc/passwd && echo r", 0, "ro\nr\n"},
		{"proc", "grep -c ^processor /proc/cpuinfo; nproc; grep MemTotal /proc/meminfo; grep ^Uid /proc/self/status; grep -q hybox /proc/version && echo version", 0,
			"1\n1\nMemTotal:       65536 kB\nUid:\t1000\t1000\t1000\t1000\nversion\n"},
		{"proc read-only", "echo 1 > /proc/self/status", 1, "open /proc/self/status: Read-only file system\n"},
	} {
		t.Run("shell/"+c.name, func(t *testing.T) {
			code, out := shell(t, be, c.src)
			assert.Equal(t, c.code, code, out)
			assert.Contains(t, out, c.out)
			if c.code == 0 {
				assert.Equal(t, c.out, out)
			}
		})
	}

	t.Run("python", func(t *testing.T) {
		out := run(t, be, "python", `import os, pwd, grp
print(open('/etc/os-release').read().splitlines()[1])
print(pwd.getpwnam('nobody').pw_uid, pwd.getpwuid(0).pw_name, pwd.getpwnam('user').pw_dir)
print(grp.getgrgid(65534).gr_name, grp.getgrnam('user').gr_gid)
try:
    pwd.getpwnam('bob')
except KeyError as e:
    print(e)
print(os.getuid(), os.getgid(), pwd.getpwuid(os.getuid()).pw_name)
try:
    open('/etc/passwd', 'a').write('bob:x:1:1::/:/bin/sh\n')
except OSError as e:
    print(e.errno == __import__('errno').EROFS)
try:
    os.remove('/etc/hostname')
except OSError as e:
    print(e.errno == __import__('errno').EROFS)
print(open('/etc/hostname').read().strip())
print(open('/proc/meminfo').readline().split()[1])
import socket
print(socket.gethostname())`)
		assert.Equal(t, "NAME=\"hybox\"\n65534 root /home/user\nnogroup 1000\n\"getpwnam(): name not found: 'bob'\"\n1000 1000 user\nTrue\nTrue\nsbx-linux\n65536\nsbx-linux\n", out)
		code, out := shell(t, be, `python3 -c "import pwd; print(pwd.getpwnam('root').pw_shell)"`)
		assert.Equal(t, 0, code, out)
		assert.Equal(t, "/bin/sh\n", out)
	})

	t.Run("javascript", func(t *testing.T) {
		out := run(t, be, "javascript", `const fs = require('fs');
console.log(fs.readFileSync('/etc/passwd', 'utf8').split('\n').find((l) => l.startsWith('nobody:')));
console.log(fs.readFileSync('/etc/hostname', 'utf8').trim());
for (const f of [() => fs.writeFileSync('/etc/passwd', 'x'), () => fs.unlinkSync('/etc/hosts'), () => fs.renameSync('/tmp', '/etc/tmp')]) {
  try { f(); console.log('changed'); } catch (e) { console.log(e.code); }
}
const os = require('os');
console.log(os.hostname(), os.userInfo().username, os.userInfo().uid, os.totalmem() === 64 * 1024 * 1024, os.cpus().length);`)
		assert.Equal(t, "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\nsbx-linux\nEROFS\nEROFS\nEROFS\nsbx-linux user 1000 true 1\n", out)
	})

	t.Run("restore writes them again", func(t *testing.T) {
		etc := filepath.Join(spec.Dir, "fs", "etc")
		require.NoError(t, os.Chmod(etc, 0o755))
		require.NoError(t, os.Remove(filepath.Join(etc, "passwd")))
		require.NoError(t, os.WriteFile(filepath.Join(etc, "motd"), []byte("kept\n"), 0o644))
		require.NoError(t, os.Chmod(filepath.Join(etc, "hosts"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(etc, "hosts"), []byte("10.0.0.1 evil\n"), 0o644))
		groupBefore, err := os.Stat(filepath.Join(etc, "group"))
		require.NoError(t, err)
		require.NoError(t, sb.Close(context.Background()))
		spec2 := spec
		spec2.Env = map[string]string{"HOSTNAME": "box.example"}
		sb2, err := rt.Restore(context.Background(), spec2)
		require.NoError(t, err)
		t.Cleanup(func() { _ = sb2.Close(context.Background()) })
		code, out := shell(t, sb2.(execd.Executor), "id -u nobody; hostname; hostname -s; cat /etc/motd; grep -c evil /etc/hosts")
		assert.Equal(t, 1, code, out) // grep -c found none
		assert.Equal(t, "65534\nbox.example\nbox\nkept\n0\n", out)
		groupAfter, err := os.Stat(filepath.Join(etc, "group"))
		require.NoError(t, err)
		assert.True(t, os.SameFile(groupBefore, groupAfter), "an unchanged file is not written again")
		fi, err := os.Stat(filepath.Join(etc, "hosts"))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o444), fi.Mode().Perm())
		for _, d := range []string{etc, filepath.Join(spec.Dir, "fs", "proc"), filepath.Join(spec.Dir, "fs", "proc", "self")} {
			fi, err := os.Stat(d)
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o555), fi.Mode().Perm(), d)
		}
		require.NoError(t, rt.Destroy(context.Background(), spec2))
		_, err = os.Stat(filepath.Join(spec.Dir, "fs"))
		assert.True(t, os.IsNotExist(err), "workspace removed")
	})
}
