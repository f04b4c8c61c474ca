package xt

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hybox-dev/hybox/policy/nft"
	"github.com/hybox-dev/hybox/runtimes/oci/ocitest"
)

// TestGVisor runs gvisorChecks inside gVisor's netstack: this test binary
// itself, started by runsc (network "sandbox", net-raw, no host GSO, as
// scripts/k8s/cluster.sh configures the gvisor RuntimeClass) in the
// sandbox namespace of a topology, with the host's root file system read
// only. The upstream namespace's servers are the peers. It needs root and
// the gVisor build (scripts/containers/build-gvisor.sh, cached).
func TestGVisor(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		return // the parent's test, not the child's
	}
	top := newTopology(t)
	g := ocitest.GVisor(t)
	if g.Dir == "" {
		t.Skipf("no gVisor build: %v", g.Err)
	}
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	t.Cleanup(func() {
		// runsc keeps a namespace file mounted in its root directory.
		_ = unix.Unmount(filepath.Join(state, "null-netns"), unix.MNT_DETACH)
	})
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	spec := map[string]any{
		"ociVersion": "1.0.2",
		"process": map[string]any{
			"user": map[string]int{"uid": 0, "gid": 0},
			"args": []string{self, "-test.run=^TestGVisorChild$", "-test.v", "-test.count=1"},
			"env":  []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", childEnv + "=1"},
			"cwd":  "/",
			"capabilities": map[string][]string{
				"bounding": {"CAP_NET_RAW", "CAP_NET_ADMIN"}, "effective": {"CAP_NET_RAW", "CAP_NET_ADMIN"},
				"permitted": {"CAP_NET_RAW", "CAP_NET_ADMIN"},
			},
		},
		"root":     map[string]any{"path": "/", "readonly": true},
		"hostname": "xt",
		"mounts":   []map[string]string{{"destination": "/proc", "type": "proc", "source": "proc"}},
		"linux": map[string]any{"namespaces": []map[string]string{
			{"type": "pid"}, {"type": "network", "path": top.sandbox.Path}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"},
		}},
	}
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("hybox-xt-%d", os.Getpid())
	runsc := []string{"--root", state, "--platform", g.Platform, "--network", "sandbox",
		"--net-raw", "--gso=false", "--overlay2", "root:memory"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, g.Runsc(), append(runsc, "run", "--bundle", dir, id)...)
	out, err := cmd.CombinedOutput()
	_ = exec.Command(g.Runsc(), append(runsc, "delete", "-force", id)...).Run()
	t.Logf("in gVisor:\n%s", out)
	if err != nil {
		t.Fatalf("runsc run: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	passed := false
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "--- PASS: TestGVisorChild") {
			passed = true
		}
	}
	if !passed {
		t.Fatal("the checks in gVisor failed (above)")
	}
}

// childEnv marks the test binary that runs inside gVisor.
const childEnv = "HYBOX_XT_GVISOR_CHILD"

// TestGVisorChild is TestGVisor's part inside the sandbox; it skips
// anywhere else.
func TestGVisorChild(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("runs inside gVisor, started by TestGVisor")
	}
	const self = "/proc/self/ns/net"
	tab, err := Open(self, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tab.Close()
	const guard, proxyPort = tcpPort + 1, 15001
	r := nft.Rules{Enforce: true, BypassMark: mark, GuardPorts: []uint16{guard},
		IPRules: []nft.IPRule{{Prefix: pfx("10.252.1.1/32"), Allow: true}}}
	if err := tab.Apply(r, nil); err != nil {
		t.Fatal(err)
	}

	t.Run("ReadsBack", func(t *testing.T) {
		// The netstack gives back the tables it took.
		m := tab.modelLocked(time.Now())
		for fi, f := range families {
			if tab.socks[fi] < 0 {
				continue
			}
			for _, want := range []*table{m.filter(f), m.nat(f)} {
				if got := readBack(t, tab.socks[fi], f, want.name); got.String() != want.String() {
					t.Errorf("%s %s: the netstack has\n%s\nwant\n%s", f, want.name, got, want)
				}
			}
		}
	})
	t.Run("Policy", func(t *testing.T) {
		wantAllowed(t, self, upA)
		wantRefused(t, self, upB, tcpPort) // the netstack's REJECT on output: a reset at once
		wantRefused(t, self, upA, 53)
		if err := udpEcho(self, upA, udpPort); err != nil {
			t.Errorf("UDP to an allowed address: %v", err)
		}
		if err := udpEcho(self, upB, udpPort); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("UDP to a denied address: %v, want port unreachable", err)
		}
		if err := tab.Learn([]netip.Addr{upC}, time.Second); err != nil {
			t.Fatal(err)
		}
		wantAllowed(t, self, upC)
		time.Sleep(nft.MinTTL + expirySlack + 300*time.Millisecond)
		wantRefused(t, self, upC, tcpPort)
	})
	t.Run("GuardAndMark", func(t *testing.T) {
		l, err := net.Listen("tcp", netip.AddrPortFrom(sandbox4, guard).String())
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		for _, a := range []netip.Addr{sandbox4, netip.MustParseAddr("127.0.0.1"), upA} {
			wantRefused(t, self, a, guard)
		}
		for _, dst := range []netip.AddrPort{netip.AddrPortFrom(sandbox4, guard), netip.AddrPortFrom(upD, tcpPort)} {
			if err := dialMarked(self, dst); err != nil {
				t.Errorf("a marked connection to %v: %v", dst, err)
			}
		}
	})
	t.Run("GuardFrom", func(t *testing.T) {
		// A socket may bind the agent's port beside its listener here
		// (SO_REUSEADDR): no connection from it gets through, so one on
		// it is always the agent's. (The netstack does not connect from
		// a socket bound to one address: the socket binds them all.)
		c, err := dialFrom(self, netip.AddrPortFrom(netip.IPv4Unspecified(), guard), netip.AddrPortFrom(upA, tcpPort), true)
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("a connection from the guarded port: %v, want it refused", err)
		}
		if c != nil {
			c.Close()
		}
	})
	t.Run("Cut", func(t *testing.T) {
		// With the netstack's host segmentation offload off, the REJECT
		// for a flow resets its socket on the next packet.
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(upA, tcpPort).String(), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cutResets(t, tab, c, upA)
	})
	t.Run("CutShielded", func(t *testing.T) {
		// A listener on the port of the workload's own connection
		// (SO_REUSEPORT, made after it) does not keep it.
		c, err := dialFrom(self, netip.AddrPortFrom(netip.IPv4Unspecified(), 0), netip.AddrPortFrom(upA, tcpPort), true)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		l, err := (&net.ListenConfig{Control: reusePort}).Listen(context.Background(), "tcp", c.LocalAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		cutResets(t, tab, c, upA)
	})
	t.Run("CutMany", func(t *testing.T) {
		// More flows than their rules fit: all cut, by destination.
		wide := r
		wide.IPRules = append(wide.IPRules, nft.IPRule{Prefix: pfx("10.252.1.4/32"), Allow: true})
		if err := tab.Apply(wide, nil); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := tab.Apply(r, nil); err != nil {
				t.Error(err)
			}
		}()
		var conns []net.Conn
		for range 150 {
			c, err := net.DialTimeout("tcp", netip.AddrPortFrom(upC, tcpPort).String(), 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			conns = append(conns, c)
		}
		cut, err := tab.Cut(func(a netip.Addr) bool { return a == upC })
		if err != nil || len(cut) != len(conns) {
			t.Fatalf("cut %d of %d flows: %v", len(cut), len(conns), err)
		}
		for i, c := range conns {
			if _, err := roundTrip(c); !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("cut flow %d: next exchange %v, want a reset", i, err)
			}
		}
	})
	t.Run("Redirect", func(t *testing.T) {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", proxyPort))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		dsts := make(chan netip.AddrPort, 4)
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				dst, _ := OriginalDst(c)
				dsts <- dst
				_, _ = c.Write([]byte("proxy\n"))
				c.Close()
			}
		}()
		r.RedirectPort = proxyPort
		if err := tab.Apply(r, nil); err != nil {
			t.Fatal(err)
		}
		got, err := dialTCP(self, upA, tcpPort)
		if err != nil || got != "proxy" {
			t.Fatalf("TCP to %v: %q, %v; want the proxy", upA, got, err)
		}
		if dst := <-dsts; dst != netip.AddrPortFrom(upA, tcpPort) {
			t.Errorf("original destination %v", dst)
		}
		wantRefused(t, self, upB, tcpPort)
	})
}

// cutResets checks that c, an open flow to up, answers, that a cut of up
// cuts one flow, and that c's next exchange is then reset.
func cutResets(t *testing.T, tab *Table, c net.Conn, up netip.Addr) {
	t.Helper()
	if _, err := roundTrip(c); err != nil {
		t.Fatal(err)
	}
	cut, err := tab.Cut(func(a netip.Addr) bool { return a == up })
	if err != nil || len(cut) != 1 {
		t.Fatalf("cut %v, %v", cut, err)
	}
	if _, err := roundTrip(c); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("the cut flow's next exchange: %v, want a reset", err)
	}
}
