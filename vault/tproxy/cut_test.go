package tproxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/vault/tproxy"
)

// TestAdmitRefuses: a destination Admit refuses is reset before anything
// is read or dialled; one it admits is served.
func TestAdmitRefuses(t *testing.T) {
	e := newEnv(t, dstRaw, func(e *env, c *tproxy.Config) {
		c.Admit = func(dst netip.AddrPort) error {
			if dst == dstRaw {
				return errors.New("denied by the policy")
			}
			return nil
		}
	})
	addr, accepted := bannerServer(t)
	e.route(dstRaw, addr)
	// The reset may come before the dial returns (loopback is fast).
	conn, err := net.Dial("tcp", e.addr)
	if err == nil {
		defer conn.Close()
		require.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
		_, err = conn.Read(make([]byte, 1))
	}
	assert.ErrorIs(t, err, syscall.ECONNRESET, "refused with a reset")
	assert.Empty(t, e.dialed())
	assert.Zero(t, accepted.Load())

	e.dst.Store(&dstHTTP)
	e.plainUpstream(dstHTTP, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	c, _ := e.client(nil)
	res, err := c.Get("http://" + unboundHost + "/")
	require.NoError(t, err)
	assert.Equal(t, "ok", readBody(t, res))
}

// TestCutResetsBothSides: Cut resets a spliced connection whose original
// destination deny refuses, on both sides at once, although both are
// idle; other connections go on.
func TestCutResetsBothSides(t *testing.T) {
	e := newEnv(t, dstRaw, nil)
	upstream := make(chan net.Conn, 2)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "220 ready\r\n")
			upstream <- c
		}
	}()
	other := netip.MustParseAddrPort("192.0.2.30:25")
	e.route(dstRaw, l.Addr().String())
	e.route(other, l.Addr().String())

	open := func(dst netip.AddrPort) (net.Conn, net.Conn) {
		e.dst.Store(&dst)
		conn, err := net.Dial("tcp", e.addr)
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		line, err := bufio.NewReader(conn).ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "220 ready\r\n", line)
		up := <-upstream
		t.Cleanup(func() { up.Close() })
		return conn, up
	}
	cutConn, cutUp := open(dstRaw)
	keptConn, keptUp := open(other)

	n := e.proxy.Cut(func(dst netip.AddrPort) bool { return dst == dstRaw })
	assert.Equal(t, 1, n)
	for name, c := range map[string]net.Conn{"sandbox": cutConn, "upstream": cutUp} {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
		_, err := c.Read(make([]byte, 1))
		assert.ErrorIs(t, err, syscall.ECONNRESET, "the %s side is reset", name)
	}
	_, err = io.WriteString(keptConn, "still\r\n")
	require.NoError(t, err)
	require.NoError(t, keptUp.SetReadDeadline(time.Now().Add(5*time.Second)))
	line, err := bufio.NewReader(keptUp).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "still\r\n", line, "the other connection goes on")
	assert.Zero(t, e.proxy.Cut(func(netip.AddrPort) bool { return false }))
}
