package wasmfs

import "strings"

// SystemDir is the workspace directory holding the sandbox's system files,
// the guest's /etc (os-release, passwd, group, hostname, hosts,
// resolv.conf). The backend writes it whenever it opens the sandbox;
// guests see it read-only: every call that would change something in it
// fails with EROFS, as on a read-only mount.
const SystemDir = "etc"

// IsSystem reports whether the root-relative name (as os.Root takes it:
// no leading slash, "." for the root) is SystemDir or lies below it. The
// test is on the cleaned name; a guest that reaches the directory through
// a symlink of its own changes its own view only, and the backend writes
// the files again at the next open.
func IsSystem(name string) bool {
	name = strings.TrimLeft(name, "/")
	for strings.HasPrefix(name, "./") {
		name = strings.TrimLeft(name[2:], "/")
	}
	return name == SystemDir || strings.HasPrefix(name, SystemDir+"/")
}
