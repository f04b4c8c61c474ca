package wasmfs

import "strings"

// SystemDirs are the workspace directories holding the sandbox's system
// files: the guest's /etc (os-release, passwd, group, hostname, hosts,
// resolv.conf) and a static /proc (version, cpuinfo, meminfo, self/status).
// The backend writes them whenever it opens the sandbox; guests see them
// read-only: every call that would change something in them fails with
// EROFS, as on a read-only mount.
func SystemDirs() []string { return []string{"etc", "proc"} }

// IsSystem reports whether the root-relative name (as os.Root takes it:
// no leading slash, "." for the root) is one of SystemDirs or lies below
// one. The test is on the cleaned name; a guest that reaches a directory
// through a symlink of its own changes its own view only, and the backend
// writes the files again at the next open.
func IsSystem(name string) bool {
	name = strings.TrimLeft(name, "/")
	for strings.HasPrefix(name, "./") {
		name = strings.TrimLeft(name[2:], "/")
	}
	for _, d := range SystemDirs() {
		if name == d || strings.HasPrefix(name, d+"/") {
			return true
		}
	}
	return false
}
