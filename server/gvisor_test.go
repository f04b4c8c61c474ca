package server

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/runtimes/oci/ocitest"
)

// What a workload does first, under gVisor and (as the reference) runc:
// coreutils that use statx, the process list, and the file churn of a
// package install (many small files created, renamed and removed).
// Debian's runsc (2022-12) failed the first of these ("ls: cannot access
// '/': Invalid argument").
func TestContainerWorkloadBasics(t *testing.T) {
	h := newHarness(t, "", harnessOpts{containers: true})
	for _, runtime := range []string{"runc", "runsc"} {
		t.Run(runtime, func(t *testing.T) {
			sb := h.create(map[string]any{
				"image":      map[string]string{"uri": ocitest.ImageName},
				"extensions": map[string]string{"hybox.io/runtime": runtime},
				"entrypoint": []string{"sleep", "infinity"},
			})
			t.Cleanup(func() { h.do("DELETE", "/v1/sandboxes/"+sb.ID, nil) })
			for _, tc := range []struct {
				name, cmd string
				want      []string // stdout lines, exactly
			}{
				{"ls -la /", "ls -la / | awk '$NF==\"etc\" || $NF==\"usr\" {print $1, $NF}'", []string{"drwxr-xr-x etc", "drwxr-xr-x usr"}},
				{"stat", "stat -c '%n %s %a %U' /etc/hosts && stat -f -c %T / >/dev/null && echo statfs", []string{"/etc/hosts 61 644 root", "statfs"}},
				{"find", "find /usr/bin -name 'python3*' -type f | sort | head -1; find /etc -maxdepth 1 -name hosts -newermt 2000-01-01", []string{"/usr/bin/python3.11", "/etc/hosts"}},
				{"ps", "ps -eo pid,comm | awk '$1==1 {print $2}'; ps -eo comm | grep -cx sleep", []string{"hybox-execd", "1"}},
				{"df and du", "df -P / >/dev/null && du -sk /etc >/dev/null && echo ok", []string{"ok"}},
				{"file churn", `python3 - <<'PY'
import os, shutil
root = "/tmp/site-packages"
for p in range(40):
    d = os.path.join(root, "pkg%d" % p, "sub")
    os.makedirs(d)
    for f in range(50):
        with open(os.path.join(d, "m%d.py.tmp" % f), "w") as fh:
            fh.write("x = %d\n" % f)
        os.rename(os.path.join(d, "m%d.py.tmp" % f), os.path.join(d, "m%d.py" % f))
n = sum(len(fs) for _, _, fs in os.walk(root))
for p in range(0, 40, 2):
    shutil.rmtree(os.path.join(root, "pkg%d" % p))
m = sum(len(fs) for _, _, fs in os.walk(root))
print(n, m, len(os.listdir(root)))
PY`, []string{"2000 1000 20"}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					o := h.command(sb.ID, tc.cmd)
					require.Nil(t, o.err, "stderr: %s", strings.Join(o.stderr, ""))
					assert.Empty(t, o.stderr)
					assert.Equal(t, tc.want, o.stdout)
				})
			}
		})
	}
}
