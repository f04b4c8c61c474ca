// Package netns runs work inside a network namespace named by a path (such
// as /run/netns/hybox-<id>) from a Go process: it pins the calling goroutine
// to its OS thread, moves that thread into the namespace, runs the work and
// moves it back. Sockets created meanwhile stay in the namespace for life,
// so a listener or connection made here can be used from any goroutine.
package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"

	"golang.org/x/sys/unix"
)

// selfNS names the network namespace of the calling thread. It must be
// opened after runtime.LockOSThread: /proc/self would name the thread
// group leader instead.
const selfNS = "/proc/thread-self/ns/net"

// ErrNotLiteral is returned (wrapped) when an address is not an IP literal.
// Name resolution would run on other threads, in the wrong namespace.
var ErrNotLiteral = errors.New("address must be an IP literal with a port")

// Do runs fn on a thread that has joined the network namespace at nsPath,
// then returns the thread to its previous namespace. fn must do its
// namespace-sensitive work (socket creation) on its own goroutine: other
// goroutines it starts do not run in the namespace.
//
// If the thread cannot be returned to its namespace, it stays locked to
// the goroutine, so the Go runtime discards it when Do's caller exits
// instead of reusing it for unrelated work.
//
// # Errors
//
// Opening nsPath or joining it fails (for example, the path is not a
// network namespace or the caller lacks CAP_SYS_ADMIN); fn's error is
// returned as is; failing to return to the original namespace is joined
// to fn's error.
func Do(nsPath string, fn func() error) (err error) {
	target, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("netns: open %s: %w", nsPath, err)
	}
	defer unix.Close(target)
	if isSelf(target) {
		// Already there (a process that enforces its own namespace, such
		// as hybox-egress in a Pod): no setns, which would need
		// CAP_SYS_ADMIN.
		return fn()
	}

	runtime.LockOSThread()
	orig, err := unix.Open(selfNS, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: open %s: %w", selfNS, err)
	}
	defer unix.Close(orig)

	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: join %s: %w", nsPath, err)
	}
	// Deferred so that the thread also returns when fn panics.
	defer func() {
		if rerr := unix.Setns(orig, unix.CLONE_NEWNET); rerr != nil {
			// Keep the thread locked: it is tainted and must die with
			// the goroutine.
			err = errors.Join(err, fmt.Errorf("netns: return from %s: %w", nsPath, rerr))
			return
		}
		runtime.UnlockOSThread()
	}()
	return fn()
}

// Self reports whether nsPath names the network namespace of this process
// (its threads share one: nothing here moves a thread for longer than a
// Do). Callers that open netlink sockets "in" a namespace use it to skip
// joining the one they are in.
func Self(nsPath string) bool {
	fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return isSelf(fd)
}

// isSelf reports whether the namespace file fd is this process's network
// namespace.
func isSelf(fd int) bool {
	var a, b unix.Stat_t
	if unix.Fstat(fd, &a) != nil || unix.Stat("/proc/self/ns/net", &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

// ListenTCP listens on addr ("ip:port"; the IP may be empty for all
// addresses, the port 0 for any) inside the network namespace at nsPath.
//
// # Errors
//
// addr is not an IP literal (wrapping [ErrNotLiteral]), the namespace
// cannot be joined, or the listen fails.
func ListenTCP(nsPath, addr string) (net.Listener, error) {
	ap, err := parseListen(addr)
	if err != nil {
		return nil, err
	}
	var l *net.TCPListener
	err = Do(nsPath, func() error {
		var lerr error
		l, lerr = net.ListenTCP("tcp", net.TCPAddrFromAddrPort(ap))
		return lerr
	})
	if err != nil {
		if l != nil {
			_ = l.Close()
		}
		return nil, fmt.Errorf("netns: listen tcp %s in %s: %w", addr, nsPath, err)
	}
	return l, nil
}

// ListenUDP binds a UDP socket to addr (as for [ListenTCP]) inside the
// network namespace at nsPath.
//
// # Errors
//
// As for [ListenTCP].
func ListenUDP(nsPath, addr string) (net.PacketConn, error) {
	ap, err := parseListen(addr)
	if err != nil {
		return nil, err
	}
	var c *net.UDPConn
	err = Do(nsPath, func() error {
		var lerr error
		c, lerr = net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap))
		return lerr
	})
	if err != nil {
		if c != nil {
			_ = c.Close()
		}
		return nil, fmt.Errorf("netns: listen udp %s in %s: %w", addr, nsPath, err)
	}
	return c, nil
}

// Dial connects to addr ("ip:port", an IP literal) from inside the network
// namespace at nsPath. network is tcp, tcp4, tcp6, udp, udp4 or udp6.
// Cancelling ctx aborts a connection attempt in progress.
//
// # Errors
//
// An unsupported network, addr not an IP literal (wrapping
// [ErrNotLiteral]), the namespace cannot be joined, or the dial fails
// (the dial error is wrapped, so errors.Is(err, syscall.ECONNREFUSED)
// works).
func Dial(ctx context.Context, nsPath, network, addr string) (net.Conn, error) {
	switch network {
	case "tcp", "tcp4", "tcp6", "udp", "udp4", "udp6":
	default:
		return nil, fmt.Errorf("netns: dial: unsupported network %q", network)
	}
	if _, err := netip.ParseAddrPort(addr); err != nil {
		return nil, fmt.Errorf("netns: dial %s: %w: %w", addr, ErrNotLiteral, err)
	}
	var c net.Conn
	err := Do(nsPath, func() error {
		// With a single literal address the dialer creates the socket on
		// this goroutine (no parallel attempts on other threads).
		var d net.Dialer
		var derr error
		c, derr = d.DialContext(ctx, network, addr)
		return derr
	})
	if err != nil {
		if c != nil {
			_ = c.Close()
		}
		return nil, fmt.Errorf("netns: dial %s %s in %s: %w", network, addr, nsPath, err)
	}
	return c, nil
}

// parseListen parses "ip:port" or ":port".
func parseListen(addr string) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("netns: listen %s: %w: %w", addr, ErrNotLiteral, err)
	}
	if host == "" {
		host = "::" // dual-stack wildcard, as net.Listen does for ":port"
	}
	ap, err := netip.ParseAddrPort(net.JoinHostPort(host, port))
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("netns: listen %s: %w: %w", addr, ErrNotLiteral, err)
	}
	return ap, nil
}
