package jsguest

import "github.com/hybox-dev/hybox/runtimes/wasm/wasmfs"

// systemSyscall is the node syscall name of an fs operation that would
// change the sandbox's read-only /etc or /proc (wasmfs.IsSystem), or "" when op
// leaves it alone. name is root-relative; to resolves the second path of
// rename and copyFile (the other operations carry data there).
func systemSyscall(op, name string, to func() string) string {
	switch op {
	case "write", "writeLatin1":
		if wasmfs.IsSystem(name) {
			return "open"
		}
	case "mkdir", "unlink", "rmdir", "rm":
		if wasmfs.IsSystem(name) {
			return op
		}
	case "rename":
		if wasmfs.IsSystem(name) || wasmfs.IsSystem(to()) {
			return "rename"
		}
	case "copyFile":
		if wasmfs.IsSystem(to()) {
			return "copyfile"
		}
	}
	return ""
}
