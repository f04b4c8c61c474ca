package wasmfs

import "os"

// GuestUID and GuestGID are the ids a wasm sandbox's programs run as: the
// user of its /etc/passwd, whom `id` names.
const (
	GuestUID = 1000
	GuestGID = 1000
)

// mayChown says whether the server can give files away (it runs as root);
// otherwise what guests create belongs to the server's own user.
var mayChown = os.Geteuid() == 0

// own gives the just-created name (not followed) to the guest user.
func own(root *os.Root, name string) {
	if mayChown {
		_ = root.Lchown(name, GuestUID, GuestGID)
	}
}

// ownFile gives the just-created open file to the guest user.
func ownFile(f *os.File) {
	if mayChown {
		_ = f.Chown(GuestUID, GuestGID)
	}
}

// exists reports whether name (not followed) is there.
func exists(root *os.Root, name string) bool {
	_, err := root.Lstat(name)
	return err == nil
}
