package oci_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hybox-dev/hybox/runtimes/oci/ocitest"
)

// Capability bits (linux/capability.h).
const (
	capNetRaw    = 13
	capSysPtrace = 19
	capSysAdmin  = 21
)

// statusField reads one "Name:\tvalue" line of /proc/self/status output.
func statusField(status, name string) (string, bool) {
	for _, line := range strings.Split(status, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == name {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// TestSecureDefaults checks, from inside runc and runsc sandboxes, the
// privileges a sandbox process has: no new privileges, seccomp (runc), a
// reduced capability set, a read-only execd binary, the pids limit, and
// no host path.
func TestSecureDefaults(t *testing.T) {
	b := newBackend(t)
	for _, name := range []string{"runc", "runsc"} {
		t.Run(name, func(t *testing.T) {
			spec := testSpec(t, "secure-"+name)
			c := newExecClient(t, mustCreate(t, runtimeNamed(t, b, name), spec))

			status := c.run("cat /proc/self/status").Stdout
			capEff, ok := statusField(status, "CapEff")
			if !ok {
				t.Fatalf("no CapEff in /proc/self/status:\n%s", status)
			}
			caps, err := strconv.ParseUint(capEff, 16, 64)
			if err != nil {
				t.Fatalf("CapEff %q: %v", capEff, err)
			}
			for bit, cname := range map[int]string{capSysAdmin: "CAP_SYS_ADMIN", capNetRaw: "CAP_NET_RAW", capSysPtrace: "CAP_SYS_PTRACE"} {
				if caps&(1<<bit) != 0 {
					t.Errorf("CapEff %s includes %s", capEff, cname)
				}
			}
			if name == "runc" {
				// gVisor reports neither; its own kernel filters syscalls.
				if v, _ := statusField(status, "NoNewPrivs"); v != "1" {
					t.Errorf("NoNewPrivs = %q, want 1", v)
				}
				if v, _ := statusField(status, "Seccomp"); v != "2" {
					t.Errorf("Seccomp = %q, want 2 (filter)", v)
				}
			}

			if o := c.run("echo overwritten > /.hybox/bin/hybox-execd"); o.EValue == "" || o.EValue == "0" || !strings.Contains(o.Stderr, "Read-only") {
				t.Errorf("writing the execd binary: %+v, want a read-only failure", o)
			}
			if o := c.run("chmod 777 /.hybox/bin/hybox-execd"); o.EValue == "" || o.EValue == "0" {
				t.Errorf("chmod of the execd binary succeeded: %+v", o)
			}

			// Host paths: none of these exist in the image; bash's test
			// uses stat(2) (gVisor of this vintage rejects coreutils' statx).
			for _, p := range []string{"/work", "/root/go", "/var/lib/hybox-test", ocitest.RepoRoot()} {
				if o := c.run("test -e " + p + " && echo present || echo absent"); o.Stdout != "absent" {
					t.Errorf("host path %s visible in the sandbox: %+v", p, o)
				}
			}
			if o := c.run(`tr '\0' ' ' < /proc/1/cmdline`); !strings.HasPrefix(o.Stdout, "/.hybox/bin/hybox-execd ") {
				t.Errorf("PID 1 is %q, want hybox-execd", o.Stdout)
			}

			// The pids limit, on the host's cgroup of the sandbox (runc and
			// runsc both place the container there) and, for runc, as the
			// sandbox sees it.
			hostMax, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/pids", ocitest.Namespace, spec.ID, "pids.max"))
			if err != nil {
				t.Fatalf("host pids cgroup: %v", err)
			}
			if got := strings.TrimSpace(string(hostMax)); got != "1024" {
				t.Errorf("host pids.max = %s, want 1024", got)
			}
			if name == "runc" {
				if o := c.run("cat /sys/fs/cgroup/pids/pids.max"); o.Stdout != "1024" {
					t.Errorf("pids.max in the sandbox: %+v", o)
				}
				if o := c.run("echo 100000 > /sys/fs/cgroup/pids/pids.max"); o.EValue == "" || o.EValue == "0" {
					t.Errorf("the sandbox could raise its pids limit: %+v", o)
				}
				if o := c.run("cat /sys/fs/cgroup/memory/memory.limit_in_bytes"); o.Stdout != strconv.FormatInt(spec.MemoryBytes, 10) {
					t.Errorf("memory limit in the sandbox: %+v", o)
				}
			}
		})
	}
}
