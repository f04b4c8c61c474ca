// Package netnstest creates throwaway network namespaces for tests that
// need root: named hybox-nt-<random>, with loopback up, removed when the
// test ends.
package netnstest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Prefix starts the name of every namespace made here, so leftovers are
// easy to find: ip netns list | grep hybox-nt-.
const Prefix = "hybox-nt-"

// RequireRoot skips t unless the process runs as root and the ip binary
// exists: namespaces and nftables need CAP_SYS_ADMIN and CAP_NET_ADMIN.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces (run the tests as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs the ip binary (iproute2)")
	}
}

// Namespace is a throwaway network namespace.
type Namespace struct {
	Name string // as given to ip netns
	Path string // /run/netns/<Name>
}

// New creates a namespace with loopback up and registers its removal with
// t.Cleanup. It skips t as [RequireRoot] does.
func New(t testing.TB) Namespace {
	t.Helper()
	RequireRoot(t)
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := Prefix + hex.EncodeToString(b[:])
	Run(t, "ip", "netns", "add", name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	Run(t, "ip", "-n", name, "link", "set", "lo", "up")
	return Namespace{Name: name, Path: filepath.Join("/run/netns", name)}
}

// Run runs a command and fails t with its output when it fails.
func Run(t testing.TB, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}
