package netns_test

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/hybox-dev/hybox/internal/netns"
	"github.com/hybox-dev/hybox/internal/netns/netnstest"
)

// inode identifies a namespace file.
func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Stat(path, &st))
	return st.Ino
}

func TestDoRunsInsideAndReturns(t *testing.T) {
	ns := netnstest.New(t)
	want := inode(t, ns.Path)

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := inode(t, "/proc/thread-self/ns/net")
	require.NotEqual(t, want, before)

	var inside uint64
	require.NoError(t, netns.Do(ns.Path, func() error {
		inside = inode(t, "/proc/thread-self/ns/net")
		return nil
	}))
	assert.Equal(t, want, inside, "fn ran in the target namespace")
	assert.Equal(t, before, inode(t, "/proc/thread-self/ns/net"), "thread returned to its namespace")
}

func TestDoReturnsAfterPanic(t *testing.T) {
	ns := netnstest.New(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := inode(t, "/proc/thread-self/ns/net")
	func() {
		defer func() { assert.Equal(t, "boom", recover()) }()
		_ = netns.Do(ns.Path, func() error { panic("boom") })
	}()
	assert.Equal(t, before, inode(t, "/proc/thread-self/ns/net"))
}

func TestDoErrors(t *testing.T) {
	ns := netnstest.New(t)
	errFn := errors.New("from fn")
	tests := []struct {
		name string
		path string
		fn   func() error
		is   error
	}{
		{name: "missing path", path: "/run/netns/hybox-nt-does-not-exist", fn: func() error { return nil }, is: unix.ENOENT},
		{name: "not a network namespace", path: "/proc/self/ns/uts", fn: func() error { return nil }, is: unix.EINVAL},
		{name: "fn error passes through", path: ns.Path, fn: func() error { return errFn }, is: errFn},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := netns.Do(tt.path, tt.fn)
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.is)
		})
	}
}

func TestListenTCPInsideNamespace(t *testing.T) {
	ns := netnstest.New(t)
	l, err := netns.ListenTCP(ns.Path, "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	addr := l.Addr().String()
	port := l.Addr().(*net.TCPAddr).Port

	// The host's loopback does not see the listener: the same port is free
	// there, and a host dial reaches the host listener, not ours.
	host, err := net.Listen("tcp", addr)
	require.NoError(t, err, "port %d must be free on the host's loopback", port)
	defer host.Close()
	go serveGreeting(host, "host")
	go serveGreeting(l, "sandbox")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	assert.Equal(t, "host", readAll(t, hc))

	c, err := netns.Dial(ctx, ns.Path, "tcp", addr)
	require.NoError(t, err)
	assert.Equal(t, "sandbox", readAll(t, c))

	// After the host listener closes, the port is refused on the host
	// while the namespace listener still answers.
	require.NoError(t, host.Close())
	_, err = net.Dial("tcp", addr)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	c, err = netns.Dial(ctx, ns.Path, "tcp", addr)
	require.NoError(t, err)
	assert.Equal(t, "sandbox", readAll(t, c))
}

func TestListenUDPInsideNamespace(t *testing.T) {
	ns := netnstest.New(t)
	pc, err := netns.ListenUDP(ns.Path, "127.0.0.1:0")
	require.NoError(t, err)
	defer pc.Close()
	go func() {
		buf := make([]byte, 64)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(append([]byte("echo:"), buf[:n]...), from)
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := netns.Dial(ctx, ns.Path, "udp", pc.LocalAddr().String())
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	_, err = c.Write([]byte("hi"))
	require.NoError(t, err)
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	require.NoError(t, err)
	assert.Equal(t, "echo:hi", string(buf[:n]))

	// The host's socket at the same port is another socket.
	hostPC, err := net.ListenPacket("udp", pc.LocalAddr().String())
	require.NoError(t, err, "the port must be free on the host's loopback")
	require.NoError(t, hostPC.Close())
}

func TestListenWildcardIsDualStack(t *testing.T) {
	ns := netnstest.New(t)
	l, err := netns.ListenTCP(ns.Path, ":0")
	require.NoError(t, err)
	defer l.Close()
	go serveGreeting(l, "any")
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, host := range []string{"127.0.0.1", "::1"} {
		c, err := netns.Dial(ctx, ns.Path, "tcp", net.JoinHostPort(host, port))
		require.NoError(t, err, host)
		assert.Equal(t, "any", readAll(t, c), host)
	}
}

func TestAddressesMustBeLiterals(t *testing.T) {
	// No namespace is joined: the address is checked first.
	ctx := context.Background()
	_, err := netns.Dial(ctx, "/nonexistent", "tcp", "localhost:80")
	assert.ErrorIs(t, err, netns.ErrNotLiteral)
	_, err = netns.Dial(ctx, "/nonexistent", "unix", "/tmp/sock")
	assert.ErrorContains(t, err, "unsupported network")
	_, err = netns.ListenTCP("/nonexistent", "localhost:0")
	assert.ErrorIs(t, err, netns.ErrNotLiteral)
	_, err = netns.ListenUDP("/nonexistent", "127.0.0.1")
	assert.ErrorIs(t, err, netns.ErrNotLiteral)
	_, err = netns.ListenTCP("/nonexistent", "127.0.0.1:0")
	assert.ErrorIs(t, err, unix.ENOENT)
}

func serveGreeting(l net.Listener, greeting string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		_, _ = c.Write([]byte(greeting))
		_ = c.Close()
	}
}

func readAll(t *testing.T, c net.Conn) string {
	t.Helper()
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	b, err := io.ReadAll(c)
	require.NoError(t, err)
	return string(b)
}
