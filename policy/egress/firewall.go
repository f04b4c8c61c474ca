package egress

import (
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/hybox-dev/hybox/policy/nft"
	"github.com/hybox-dev/hybox/policy/xt"
)

// Firewall is the packet filter a Controller programs in one network
// namespace: policy/nft's rule model (nft.Rules), applied whole, with
// learned and blocked addresses added as the sandbox resolves names, and
// the established flows a stricter policy denies cut.
type Firewall interface {
	// Apply replaces the rules and the learned addresses.
	Apply(r nft.Rules, learned []nft.Entry) error
	// Learn allows addrs for ttl.
	Learn(addrs []netip.Addr, ttl time.Duration) error
	// Block refuses addrs for ttl (after the IP rules).
	Block(addrs []netip.Addr, ttl time.Duration) error
	// Cut ends the outbound flows to what deny refuses and returns them.
	Cut(deny func(netip.Addr) bool) ([]nft.Flow, error)
	// Close releases the firewall's handles; the rules stay in force.
	Close() error
}

// FirewallBackend opens the Firewall of a namespace, and reads a
// redirected connection's original destination for the credential proxy.
type FirewallBackend interface {
	// Name is what the backend is called in logs and flags.
	Name() string
	Open(nsPath string, log *slog.Logger) (Firewall, error)
	OriginalDst(c net.Conn) (netip.AddrPort, error)
}

// The backends.
var (
	// NFTables is the kernel's nftables (policy/nft): one atomic table,
	// sets with timeouts, connection tracking, sock_diag to cut flows.
	// The default.
	NFTables FirewallBackend = nftBackend{}
	// XTables is iptables through its legacy interface (policy/xt): the
	// only packet filter of gVisor's netstack.
	XTables FirewallBackend = xtBackend{}
)

type nftBackend struct{}

func (nftBackend) Name() string { return "nftables" }

func (nftBackend) Open(nsPath string, _ *slog.Logger) (Firewall, error) {
	t, err := nft.Open(nsPath)
	if err != nil {
		return nil, err
	}
	return nftFirewall{Table: t, nsPath: nsPath}, nil
}

func (nftBackend) OriginalDst(c net.Conn) (netip.AddrPort, error) { return nft.OriginalDst(c) }

// nftFirewall is an nft.Table with its namespace's cut.
type nftFirewall struct {
	*nft.Table
	nsPath string
}

func (f nftFirewall) Cut(deny func(netip.Addr) bool) ([]nft.Flow, error) {
	return nft.Cut(f.nsPath, deny)
}

type xtBackend struct{}

func (xtBackend) Name() string { return "xtables" }

func (xtBackend) Open(nsPath string, log *slog.Logger) (Firewall, error) {
	t, err := xt.Open(nsPath, log)
	if err != nil {
		return nil, err
	}
	return t, nil
}

func (xtBackend) OriginalDst(c net.Conn) (netip.AddrPort, error) { return xt.OriginalDst(c) }

// natFirst is a Firewall whose filter runs after the redirect, and so
// sees a redirected connection only at the credential proxy's address
// (policy/xt: gVisor's netstack, and Linux's iptables, run NAT before the
// filter on output): the proxy decides each connection's original
// destination itself (Allows) and cuts the connections it holds.
type natFirst interface {
	Allows(dst netip.AddrPort) bool
}

var (
	_ Firewall = nftFirewall{}
	_ Firewall = (*xt.Table)(nil)
	_ natFirst = (*xt.Table)(nil)
)
