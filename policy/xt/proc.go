package xt

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/hybox-dev/hybox/internal/netns"
	"github.com/hybox-dev/hybox/policy/nft"
)

// A network namespace's sockets as /proc/net/{tcp,tcp6,udp,udp6} list
// them: gVisor's netstack has neither connection tracking nor sock_diag,
// and these files (of any process in the sandbox) list every socket of
// the sandbox, whichever container made it. A connection redirected to a
// proxy is listed with the peer it was addressed to.

// TCP states as the files print them (include/net/tcp_states.h).
const (
	tcpEstablished = 0x01
	tcpSynSent     = 0x02
	tcpFinWait1    = 0x04
	tcpFinWait2    = 0x05
	tcpCloseWait   = 0x08
	tcpLastAck     = 0x09
	tcpListen      = 0x0a
	tcpClosing     = 0x0b
	// udpConnected is a connected UDP socket (TCP_ESTABLISHED).
	udpConnected = 0x01
)

// sending reports TCP states in which a socket may still send, so that a
// cut's REJECT has a packet to answer.
func sending(state uint8) bool {
	switch state {
	case tcpEstablished, tcpSynSent, tcpFinWait1, tcpFinWait2, tcpCloseWait, tcpLastAck, tcpClosing:
		return true
	}
	return false
}

// sock is one line of /proc/net/{tcp,udp}{,6}.
type sock struct {
	proto         uint8 // unix.IPPROTO_TCP or unix.IPPROTO_UDP
	local, remote netip.AddrPort
	state         uint8
}

// parseProcNet reads the lines of one of the files (proto's, IPv6 when
// v6). Addresses are unmapped.
//
// # Errors
// A line that is not "sl local remote st ..." with hex addresses of the
// family's length.
func parseProcNet(b []byte, proto uint8, v6 bool) ([]sock, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 1024), 64<<10)
	var out []sock
	first := true
	for sc.Scan() {
		fields := bytes.Fields(sc.Bytes())
		if first {
			first = false
			if len(fields) > 0 && string(fields[0]) == "sl" {
				continue
			}
		}
		if len(fields) == 0 {
			continue
		}
		if len(fields) < 4 {
			return nil, fmt.Errorf("xt: /proc/net line %q: too few fields", sc.Text())
		}
		local, err := parseHexAddrPort(fields[1], v6)
		if err != nil {
			return nil, err
		}
		remote, err := parseHexAddrPort(fields[2], v6)
		if err != nil {
			return nil, err
		}
		st, err := strconv.ParseUint(string(fields[3]), 16, 8)
		if err != nil {
			return nil, fmt.Errorf("xt: /proc/net state %q: %w", fields[3], err)
		}
		out = append(out, sock{proto: proto, local: local, remote: remote, state: uint8(st)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("xt: /proc/net: %w", err)
	}
	return out, nil
}

// parseHexAddrPort reads "0100007F:0035": the address as the kernel
// prints it (each 32-bit word in host byte order), the port in hex.
func parseHexAddrPort(b []byte, v6 bool) (netip.AddrPort, error) {
	i := bytes.IndexByte(b, ':')
	n := 8
	if v6 {
		n = 32
	}
	if i != n || len(b) != n+5 {
		return netip.AddrPort{}, fmt.Errorf("xt: /proc/net address %q", b)
	}
	raw := make([]byte, n/2)
	if _, err := hex.Decode(raw, b[:n]); err != nil {
		return netip.AddrPort{}, fmt.Errorf("xt: /proc/net address %q: %w", b, err)
	}
	// Each word was printed as a number: its bytes, in memory order,
	// are the host's encoding of that number.
	addr := make([]byte, len(raw))
	for w := 0; w < len(raw); w += 4 {
		ne.PutUint32(addr[w:], uint32(raw[w])<<24|uint32(raw[w+1])<<16|uint32(raw[w+2])<<8|uint32(raw[w+3]))
	}
	port, err := strconv.ParseUint(string(b[n+1:]), 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("xt: /proc/net port %q: %w", b, err)
	}
	return netip.AddrPortFrom(addrFrom(addr).Unmap(), uint16(port)), nil
}

// readSockets lists the TCP and UDP sockets of the namespace at nsPath.
//
// # Errors
// The namespace cannot be entered or a file cannot be read or parsed. A
// missing IPv6 file (no IPv6) is not an error.
func readSockets(nsPath string) ([]sock, error) {
	out := []sock{} // not nil: none at all is an answer too
	err := netns.Do(nsPath, func() error {
		for _, f := range []struct {
			name  string
			proto uint8
			v6    bool
		}{{"tcp", unix.IPPROTO_TCP, false}, {"tcp6", unix.IPPROTO_TCP, true}, {"udp", unix.IPPROTO_UDP, false}, {"udp6", unix.IPPROTO_UDP, true}} {
			b, err := readNet(f.name)
			if errors.Is(err, fs.ErrNotExist) && f.v6 {
				continue
			}
			if err != nil {
				return err
			}
			socks, err := parseProcNet(b, f.proto, f.v6)
			if err != nil {
				return err
			}
			out = append(out, socks...)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("xt: sockets in %s: %w", nsPath, err)
	}
	return out, nil
}

// readNet reads /proc/net/name of the calling thread's namespace.
func readNet(name string) ([]byte, error) {
	b, err := os.ReadFile("/proc/thread-self/net/" + name)
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat("/proc/thread-self"); serr != nil {
			// A kernel without thread-self: every thread of this
			// process is in the same namespace (netns.Do runs fn in
			// place there).
			return os.ReadFile("/proc/self/net/" + name)
		}
	}
	return b, err
}

// cutScope is what flowsToCut decides by, besides the sockets and the
// policy.
type cutScope struct {
	// local are the namespace's own addresses (loopback excepted).
	local map[netip.Addr]bool
	// guard are the guarded ports (the agent's control port).
	guard []uint16
	// servers are the addresses known to have opened connections into
	// the namespace (serverPeers, remembered).
	servers map[netip.Addr]bool
}

// flowsToCut are the flows among socks that deny refuses: TCP connections
// that may still send and connected UDP sockets, to an address that is
// not loopback nor one of the namespace's own. Kept:
//
//   - connections on a guarded port: the agent's, accepted from the
//     server (the filter refuses a connection from a guarded port, so
//     none of them is outbound);
//   - connections from a server's address to a port that has a listener:
//     the server's connections to execd, the agent and proxied ports.
//
// Every other connection to a denied address is cut, whether the
// workload made it or accepted it: without connection tracking nothing
// tells them apart. /proc/net lists no direction, and a listener proves
// none: a workload can listen (SO_REUSEPORT, or SO_REUSEADDR in gVisor)
// on the port of its own outbound connection, before or after making it,
// so the listener's port would shield that connection. A server's
// address is one that opened a connection to a guarded port, which only
// a host able to connect into the namespace can do; such a host can talk
// to the workload through connections of its own making whatever the
// egress policy says, so keeping a flow to it that looks inbound gives
// the workload nothing it lacks.
//
// A connection redirected to the transparent proxy is listed with the
// address it was made to, and is not skipped: the proxy cuts it itself,
// and its rule matches nothing (the filter sees its packets addressed to
// the proxy). Nor does a socket on the proxy's port say which connection
// is redirected: the workload can connect to the proxy from the port of
// its own connection, as it can listen there.
func flowsToCut(socks []sock, sc cutScope, deny func(netip.Addr) bool) []nft.Flow {
	type lport struct {
		addr netip.Addr
		port uint16
	}
	listening := map[lport]bool{}
	for _, s := range socks {
		if s.proto == unix.IPPROTO_TCP && s.state == tcpListen {
			listening[lport{s.local.Addr(), s.local.Port()}] = true
		}
	}
	var out []nft.Flow
	for _, s := range socks {
		switch {
		case s.proto == unix.IPPROTO_TCP && !sending(s.state):
			continue
		case s.proto == unix.IPPROTO_UDP && (s.state != udpConnected || s.remote.Port() == 0):
			continue
		}
		dst := s.remote.Addr()
		if !dst.IsValid() || dst.IsUnspecified() || dst.IsLoopback() || sc.local[dst] {
			continue
		}
		if s.proto == unix.IPPROTO_TCP {
			if slices.Contains(sc.guard, s.local.Port()) {
				continue
			}
			wild := netip.IPv4Unspecified()
			if s.local.Addr().Is6() {
				wild = netip.IPv6Unspecified()
			}
			if sc.servers[dst] && (listening[lport{s.local.Addr(), s.local.Port()}] || listening[lport{wild, s.local.Port()}] ||
				listening[lport{netip.IPv6Unspecified(), s.local.Port()}]) {
				continue
			}
		}
		if !deny(dst) {
			continue
		}
		out = append(out, nft.Flow{Proto: s.proto, Src: s.local, Dst: s.remote})
	}
	return out
}

// serverPeers are the remote addresses of the established TCP
// connections on a guarded port among socks: the hosts that connected to
// the agent's control port, the server (its replicas) and nothing else
// but a host able to connect into the namespace anyway (see flowsToCut).
// The filter refuses a connection from a guarded port (its SYN), so such
// a connection, once established, was opened by its peer, whichever
// socket holds the port (the netstack lets a socket with SO_REUSEADDR
// bind beside the agent's listener); one in SYN-SENT is the workload's
// attempt, being refused, and does not count.
func serverPeers(socks []sock, guard []uint16, local map[netip.Addr]bool) []netip.Addr {
	var out []netip.Addr
	for _, s := range socks {
		if s.proto != unix.IPPROTO_TCP || s.state == tcpSynSent || !sending(s.state) || !slices.Contains(guard, s.local.Port()) {
			continue
		}
		a := s.remote.Addr()
		if !a.IsValid() || a.IsUnspecified() || a.IsLoopback() || local[a] || slices.Contains(out, a) {
			continue
		}
		out = append(out, a)
	}
	return out
}
