package nft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/mdlayher/netlink"
	"github.com/ti-mo/conntrack"
	"golang.org/x/sys/unix"

	"github.com/hybox-dev/hybox/internal/netns"
)

// Flow is one outbound TCP or UDP flow of a namespace, as its
// connection-tracking entry first saw it: Dst is the address the workload
// connected to, before any redirect to a proxy.
type Flow struct {
	Proto uint8 // unix.IPPROTO_TCP or unix.IPPROTO_UDP
	Src   netip.AddrPort
	Dst   netip.AddrPort
}

func (f Flow) String() string {
	p := "udp"
	if f.Proto == unix.IPPROTO_TCP {
		p = "tcp"
	}
	return fmt.Sprintf("%s %v → %v", p, f.Src, f.Dst)
}

// Cut ends the established outbound flows in the namespace at nsPath whose
// destination address deny reports as denied, and returns them. The filter
// accepts established traffic without deciding it again, so a policy made
// stricter stops only new connections until Cut runs.
//
// For each such flow, Cut first destroys the workload's socket (sock_diag
// SOCK_DESTROY: the workload's next call on it fails with ECONNABORTED and
// a TCP peer, the credential proxy included, gets a reset), then deletes
// the connection-tracking entry, so that any later packet of the flow is a
// new connection for the filter, which rejects it. Flows to loopback or to
// an address of the namespace itself (inbound connections, the proxies
// the namespace talks to) are never cut; nor is anything but TCP and UDP.
//
// An unconnected UDP socket that sent to a denied address is destroyed as
// well: the kernel finds it by the flow's addresses.
//
// # Errors
//
// The namespace cannot be entered, or connection tracking cannot be read
// or changed there. A flow that ended meanwhile is not an error; a kernel
// without SOCK_DESTROY support leaves the sockets and still deletes the
// entries.
func Cut(nsPath string, deny func(netip.Addr) bool) ([]Flow, error) {
	fd, done, err := nsFD(nsPath)
	if err != nil {
		return nil, err
	}
	defer done()
	local, err := localAddrs(nsPath)
	if err != nil {
		return nil, err
	}
	ct, err := conntrack.Dial(&netlink.Config{NetNS: fd})
	if err != nil {
		return nil, fmt.Errorf("nft: conntrack in %s: %w", nsPath, err)
	}
	defer ct.Close()
	flows, err := ct.Dump(nil)
	if err != nil {
		return nil, fmt.Errorf("nft: conntrack dump in %s: %w", nsPath, err)
	}
	var diag *netlink.Conn
	defer func() {
		if diag != nil {
			diag.Close()
		}
	}()
	var cut []Flow
	var errs []error
	for _, f := range flows {
		proto := f.TupleOrig.Proto.Protocol
		if proto != unix.IPPROTO_TCP && proto != unix.IPPROTO_UDP {
			continue
		}
		src := f.TupleOrig.IP.SourceAddress.Unmap()
		dst := f.TupleOrig.IP.DestinationAddress.Unmap()
		if !dst.IsValid() || dst.IsLoopback() || local[dst] || !deny(dst) {
			continue
		}
		fl := Flow{
			Proto: proto,
			Src:   netip.AddrPortFrom(src, f.TupleOrig.Proto.SourcePort),
			Dst:   netip.AddrPortFrom(dst, f.TupleOrig.Proto.DestinationPort),
		}
		if diag == nil {
			if diag, err = netlink.Dial(unix.NETLINK_SOCK_DIAG, &netlink.Config{NetNS: fd}); err != nil {
				return nil, fmt.Errorf("nft: sock_diag in %s: %w", nsPath, err)
			}
		}
		// Destroy first: the reset to a TCP peer still travels through
		// the entry (and its redirect, to a proxy).
		if err := destroySocket(diag, fl); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EOPNOTSUPP) {
			errs = append(errs, fmt.Errorf("destroy socket of %v: %w", fl, err))
		}
		if err := ct.Delete(f); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("delete conntrack entry of %v: %w", fl, err))
			continue
		}
		cut = append(cut, fl)
	}
	if err := errors.Join(errs...); err != nil {
		return cut, fmt.Errorf("nft: cut flows in %s: %w", nsPath, err)
	}
	return cut, nil
}

// localAddrs are the addresses of the namespace's interfaces.
func localAddrs(nsPath string) (map[netip.Addr]bool, error) {
	var addrs []net.Addr
	err := netns.Do(nsPath, func() (err error) {
		addrs, err = net.InterfaceAddrs()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("nft: addresses in %s: %w", nsPath, err)
	}
	out := make(map[netip.Addr]bool, len(addrs))
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out[p.Addr().Unmap()] = true
		}
	}
	return out, nil
}

// sockDestroy is SOCK_DESTROY of linux/sock_diag.h.
const sockDestroy = 21

// inetDiagNoCookie matches a socket whatever its cookie.
const inetDiagNoCookie = ^uint32(0)

// destroySocket asks the kernel to abort the socket of f (struct
// inet_diag_req_v2 of linux/inet_diag.h, 56 bytes).
func destroySocket(c *netlink.Conn, f Flow) error {
	b := make([]byte, 56)
	family := byte(unix.AF_INET6)
	if f.Dst.Addr().Is4() {
		family = unix.AF_INET
	}
	b[0], b[1] = family, f.Proto
	binary.NativeEndian.PutUint32(b[4:], ^uint32(0)) // idiag_states: any
	id := b[8:]
	binary.BigEndian.PutUint16(id[0:], f.Src.Port())
	binary.BigEndian.PutUint16(id[2:], f.Dst.Port())
	copy(id[4:20], f.Src.Addr().AsSlice())
	copy(id[20:36], f.Dst.Addr().AsSlice())
	binary.NativeEndian.PutUint32(id[40:], inetDiagNoCookie)
	binary.NativeEndian.PutUint32(id[44:], inetDiagNoCookie)
	_, err := c.Execute(netlink.Message{
		Header: netlink.Header{Type: sockDestroy, Flags: netlink.Request | netlink.Acknowledge},
		Data:   b,
	})
	return err
}
