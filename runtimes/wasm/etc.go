package wasm

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"
)

// The sandbox's users, as /etc/passwd and /etc/group list them. Programs run
// as user; the files API accepts these names as owners and reports them.
const (
	passwdFile = "root:x:0:0:root:/root:/bin/sh\n" +
		"user:x:1000:1000:user:/home/user:/bin/sh\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
	groupFile = "root:x:0:\n" +
		"user:x:1000:\n" +
		"nogroup:x:65534:\n"
	osReleaseFile = "PRETTY_NAME=\"hybox wasm sandbox\"\n" +
		"NAME=\"hybox\"\n" +
		"ID=hybox\n" +
		"VERSION_ID=\"1\"\n" +
		"VARIANT=\"wasm\"\n" +
		"VARIANT_ID=wasm\n" +
		"HOME_URL=\"https://github.com/hybox-dev/hybox\"\n"
	resolvFile = "# hybox wasm sandbox: programs have no sockets; the host resolves the names\n" +
		"# of their HTTP requests (curl, wget, Python, JavaScript) under the egress policy.\n" +
		"nameserver 127.0.0.53\n" +
		"options edns0\n"
	// The static /proc: what the shell's uname and nproc say, the
	// sandbox's memory limit, and the user's ids.
	procVersion = "Linux version 6.1.0-hybox (hybox wasm sandbox) #1 SMP\n"
	procCPUInfo = "processor\t: 0\nvendor_id\t: hybox\nmodel name\t: WebAssembly (wasm32)\ncpu cores\t: 1\n\n"
	procStatus  = "Uid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\nGroups:\t1000\n"
)

// systemDirs are the directories of systemFiles, parents first.
var systemDirs = []string{"etc", "proc", "proc/self"}

// systemFiles are the files of the sandbox's /etc and /proc, by
// root-relative name, for a sandbox whose host name is hostname and whose
// guests may use memBytes each.
func systemFiles(hostname string, memBytes int64) map[string]string {
	kb := memBytes >> 10
	return map[string]string{
		"etc/os-release":   osReleaseFile,
		"etc/passwd":       passwdFile,
		"etc/group":        groupFile,
		"etc/hostname":     hostname + "\n",
		"etc/hosts":        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t" + hostname + "\n",
		"etc/resolv.conf":  resolvFile,
		"proc/version":     procVersion,
		"proc/cpuinfo":     procCPUInfo,
		"proc/meminfo":     fmt.Sprintf("MemTotal:       %d kB\nMemFree:        %d kB\nMemAvailable:   %d kB\n", kb, kb, kb),
		"proc/self/status": procStatus,
	}
}

// hostnameOf is the sandbox's host name: HOSTNAME from its environment when
// the creator set one, else its id (at most 64 bytes, as on Linux).
func hostnameOf(id string, env map[string]string) string {
	h := env["HOSTNAME"]
	if h == "" || strings.ContainsAny(h, "\n\t ") {
		h = id
	}
	if h == "" {
		h = "sandbox"
	}
	if len(h) > 64 {
		h = h[:64]
	}
	return h
}

// writeSystemFiles (re)writes the sandbox's /etc and /proc in the
// workspace (wasmfs.SystemDirs): directories mode 0555 holding the files of
// systemFiles, mode 0444. Other files a caller put there are left alone.
// Guests see these directories read-only (wasmfs, the shell and the
// JavaScript fs refuse changes with EROFS); the files API writes there
// with the server's rights, and what it changed in the files written here
// is written again at the next use after an open.
//
// # Errors
// When a directory or a file cannot be written.
func writeSystemFiles(root *os.Root, hostname string, memBytes int64) error {
	for _, dir := range systemDirs {
		fi, err := root.Lstat(dir)
		switch {
		case err == nil && !fi.IsDir():
			// A file or a symlink in its place (written by an older
			// version or through the files API): the directory is the
			// backend's.
			if err := root.Remove(dir); err != nil {
				return fmt.Errorf("/%s: %w", dir, err)
			}
			fallthrough
		case errors.Is(err, fs.ErrNotExist):
			if err := root.Mkdir(dir, 0o755); err != nil {
				return fmt.Errorf("/%s: %w", dir, err)
			}
		case err != nil:
			return fmt.Errorf("/%s: %w", dir, err)
		case fi.Mode().Perm() != 0o755:
			if err := root.Chmod(dir, 0o755); err != nil {
				return fmt.Errorf("/%s: %w", dir, err)
			}
		}
	}
	files := systemFiles(hostname, memBytes)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if err := writeSystemFile(root, name, files[name]); err != nil {
			return fmt.Errorf("/%s: %w", name, err)
		}
	}
	for _, dir := range slices.Backward(systemDirs) {
		if err := root.Chmod(dir, 0o555); err != nil {
			return fmt.Errorf("/%s: %w", dir, err)
		}
	}
	return nil
}

// writeSystemFile makes name a regular file holding content, mode 0444.
// A file that already is so is left alone (a restore writes nothing); one
// that differs is replaced atomically.
func writeSystemFile(root *os.Root, name, content string) error {
	fi, err := root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return writeMode(root, name, content)
	case err != nil:
		return err
	case fi.Mode().IsRegular():
		if fi.Mode().Perm() == 0o444 && fi.Size() == int64(len(content)) {
			if b, err := root.ReadFile(name); err == nil && string(b) == content {
				return nil
			}
		}
	default:
		if err := root.RemoveAll(name); err != nil {
			return err
		}
		return writeMode(root, name, content)
	}
	tmp := name + ".new"
	_ = root.Remove(tmp) // left by an interrupted write
	if err := writeMode(root, tmp, content); err != nil {
		return err
	}
	return root.Rename(tmp, name)
}

// writeMode creates name (which must not exist) with content, mode 0444
// whatever the umask.
func writeMode(root *os.Root, name, content string) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return err
	}
	_, err = f.WriteString(content)
	if err == nil {
		if fi, serr := f.Stat(); serr == nil && fi.Mode().Perm() != 0o444 {
			err = f.Chmod(0o444)
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// unlockSystemFiles makes the system directories of the workspace at dir
// writable again, so that a server without root's rights can remove them.
// It goes through an os.Root: a directory replaced by a symlink cannot make
// it change a host directory.
func unlockSystemFiles(dir string) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return
	}
	defer root.Close()
	for _, d := range systemDirs {
		if fi, err := root.Lstat(d); err == nil && fi.IsDir() {
			_ = root.Chmod(d, 0o755)
		}
	}
}

// systemFiles writes the sandbox's /etc and /proc once, on first use (the
// execd handler, a command, a context, a session): creating or restoring a
// sandbox that nothing uses writes nothing. A failed attempt is tried
// again at the next use.
//
// # Errors
// Those of writeSystemFiles, wrapped.
func (s *Sandbox) systemFiles() error {
	s.sysMu.Lock()
	defer s.sysMu.Unlock()
	if s.sysDone {
		return nil
	}
	if err := writeSystemFiles(s.root, s.hostname, s.mem); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	s.sysDone = true
	return nil
}
