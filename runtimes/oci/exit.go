package oci

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	containerd "github.com/containerd/containerd/v2/client"

	"github.com/hybox-dev/hybox/runtimes"
)

// cgroupRoot is where the host's cgroup hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// cgroupPath is the cgroup of a sandbox, relative to each hierarchy.
func cgroupPath(namespace, id string) string { return filepath.Join("/", namespace, id) }

// unwatch stops reporting the exit of the sandbox id, if it is watched.
func (b *Containerd) unwatch(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.live[id]; s != nil {
		s.unwatchLocked()
	}
}

// exitStatus describes how the container's init ended.
func (b *Containerd) exitStatus(id string, st containerd.ExitStatus) runtimes.ExitStatus {
	code := int(st.ExitCode())
	if st.Error() != nil {
		// The wait broke (containerd went away): say killed, code unknown.
		return runtimes.ExitStatus{Code: 128 + int(syscall.SIGKILL), Reason: "Killed"}
	}
	if code != 128+int(syscall.SIGKILL) {
		return runtimes.ExitStatus{Code: code, Reason: "Exited"}
	}
	// PID 1 of a container cannot be SIGKILLed from inside it; what does
	// is the host (Destroy, which is not reported) or the OOM killer.
	if n, ok := oomKills(cgroupPath(b.opts.Namespace, id)); ok && n > 0 {
		return runtimes.ExitStatus{Code: code, Reason: "OOMKilled"}
	}
	return runtimes.ExitStatus{Code: code, Reason: "Killed"}
}

// oomKills reads the OOM-kill counter of a cgroup on the host: v2
// memory.events, else v1 memory.oom_control.
func oomKills(path string) (int64, bool) {
	for _, p := range []string{
		filepath.Join(cgroupRoot, path, "memory.events"),
		filepath.Join(cgroupRoot, "memory", path, "memory.oom_control"),
	} {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			k, v, ok := bytes.Cut(bytes.TrimSpace(sc.Bytes()), []byte(" "))
			if ok && string(k) == "oom_kill" {
				n, err := strconv.ParseInt(string(v), 10, 64)
				return n, err == nil
			}
		}
	}
	return 0, false
}
