package nft

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ip6tSoOriginalDst is IP6T_SO_ORIGINAL_DST from linux/netfilter_ipv6/ip6_tables.h.
const ip6tSoOriginalDst = 80

// ErrNotTCP is returned (wrapped) by [OriginalDst] for a connection that is
// not a TCP socket.
var ErrNotTCP = errors.New("not a TCP connection")

// OriginalDst returns the destination a redirected connection was
// addressed to before NAT, for a connection accepted by the proxy at the
// redirect port (SO_ORIGINAL_DST for IPv4, IP6T_SO_ORIGINAL_DST for IPv6).
// An IPv4 address is returned unmapped even when the listener is
// dual-stack.
//
// # Errors
//
// c is not a TCP socket (wraps [ErrNotTCP]), or conntrack has no entry
// for it (wraps unix.ENOENT). A connection that was tracked but not
// redirected reports its actual destination.
func OriginalDst(c net.Conn) (netip.AddrPort, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("nft: original destination: %w", ErrNotTCP)
	}
	la, ok := c.LocalAddr().(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("nft: original destination: %w", ErrNotTCP)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("nft: original destination: %w", err)
	}
	is4 := la.AddrPort().Addr().Unmap().Is4()
	var (
		ap   netip.AddrPort
		oerr error
	)
	err = raw.Control(func(fd uintptr) {
		if is4 {
			ap, oerr = originalDst4(fd)
		} else {
			ap, oerr = originalDst6(fd)
		}
	})
	if err == nil {
		err = oerr
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("nft: original destination of %v: %w", c.RemoteAddr(), err)
	}
	return ap, nil
}

func originalDst4(fd uintptr) (netip.AddrPort, error) {
	var sa unix.RawSockaddrInet4
	if err := getsockopt(fd, unix.SOL_IP, unix.SO_ORIGINAL_DST, unsafe.Pointer(&sa), unsafe.Sizeof(sa)); err != nil {
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), ntohs(sa.Port)), nil
}

func originalDst6(fd uintptr) (netip.AddrPort, error) {
	var sa unix.RawSockaddrInet6
	if err := getsockopt(fd, unix.SOL_IPV6, ip6tSoOriginalDst, unsafe.Pointer(&sa), unsafe.Sizeof(sa)); err != nil {
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), ntohs(sa.Port)), nil
}

// getsockopt reads a socket option of size bytes into p.
func getsockopt(fd uintptr, level, name int, p unsafe.Pointer, size uintptr) error {
	l := uint32(size)
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, uintptr(level), uintptr(name),
		uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// ntohs converts a port as stored in a raw sockaddr (network order).
func ntohs(port uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(&port))
	return uint16(b[0])<<8 | uint16(b[1])
}
