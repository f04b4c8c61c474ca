package wasm

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/hybox-dev/hybox/runtimes/wasm/wasmfs"
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
)

// systemFiles are the files of /etc, by name, for a sandbox whose host name
// is hostname.
func systemFiles(hostname string) map[string]string {
	return map[string]string{
		"os-release":  osReleaseFile,
		"passwd":      passwdFile,
		"group":       groupFile,
		"hostname":    hostname + "\n",
		"hosts":       "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t" + hostname + "\n",
		"resolv.conf": resolvFile,
		"shells":      "/bin/sh\n/bin/bash\n",
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

// writeSystemFiles (re)writes the sandbox's /etc in the workspace: the
// directory wasmfs.SystemDir, mode 0555, with the files of systemFiles,
// mode 0444. Other files a caller put there are left alone. Guests see the
// directory read-only (wasmfs and the shell refuse changes with EROFS); the
// files API writes there with the server's rights, and the files written
// here are written again at every open.
//
// # Errors
// When the directory or a file cannot be written.
func writeSystemFiles(root *os.Root, hostname string) error {
	dir := wasmfs.SystemDir
	fi, err := root.Lstat(dir)
	switch {
	case err == nil && !fi.IsDir():
		// A file or a symlink in its place (written by an older version
		// or through the files API): /etc is the backend's.
		if err := root.Remove(dir); err != nil {
			return fmt.Errorf("/etc: %w", err)
		}
		fallthrough
	case errors.Is(err, fs.ErrNotExist):
		if err := root.Mkdir(dir, 0o755); err != nil {
			return fmt.Errorf("/etc: %w", err)
		}
	case err != nil:
		return fmt.Errorf("/etc: %w", err)
	}
	if err := root.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("/etc: %w", err)
	}
	files := systemFiles(hostname)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		p := path.Join(dir, name)
		if fi, err := root.Lstat(p); err == nil && !fi.Mode().IsRegular() {
			if err := root.RemoveAll(p); err != nil {
				return fmt.Errorf("/etc/%s: %w", name, err)
			}
		}
		_ = root.Remove(p + ".new") // left by an interrupted write
		if err := root.WriteFile(p+".new", []byte(files[name]), 0o444); err != nil {
			return fmt.Errorf("/etc/%s: %w", name, err)
		}
		if err := root.Chmod(p+".new", 0o444); err != nil {
			return fmt.Errorf("/etc/%s: %w", name, err)
		}
		if err := root.Rename(p+".new", p); err != nil {
			return fmt.Errorf("/etc/%s: %w", name, err)
		}
	}
	return root.Chmod(dir, 0o555)
}

// unlockSystemFiles makes the /etc of the workspace at dir writable again,
// so that a server without root's rights can remove it. It goes through an
// os.Root: an etc that is a symlink cannot make it change a host directory.
func unlockSystemFiles(dir string) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return
	}
	defer root.Close()
	if fi, err := root.Lstat(wasmfs.SystemDir); err == nil && fi.IsDir() {
		_ = root.Chmod(wasmfs.SystemDir, 0o755)
	}
}
