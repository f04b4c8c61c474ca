// Package nft enforces a sandbox's egress policy with nftables inside the
// sandbox's network namespace. It owns one table, inet hybox, whose whole
// content is replaced in one atomic batch on every [Table.Apply]: an output
// filter (loopback and established traffic pass, DNS and DoT/DoQ to
// anything off loopback are refused, then the policy's IP rules in order,
// then the blocked-address sets, then the learned-address sets, then the
// default) and, optionally, a NAT
// rule that redirects outbound TCP to a transparent proxy listening in the
// namespace. Denied connections are rejected (TCP reset, ICMP
// administratively prohibited), never dropped, so they fail at once. For
// an enforcer that runs inside the namespace it fences, a socket mark lets
// its own traffic pass and a guard chain keeps the namespace's sockets off
// its control port.
package nft

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/hybox-dev/hybox/internal/netns"
)

// TableName is the name of the inet table this package owns.
const TableName = "hybox"

// Names of the address sets in [TableName].
const (
	Learned4 = "learned4" // ipv4_addr, flags timeout
	Learned6 = "learned6" // ipv6_addr, flags timeout
	Blocked4 = "blocked4" // ipv4_addr, flags timeout
	Blocked6 = "blocked6" // ipv6_addr, flags timeout
)

// MinTTL is the shortest lifetime of a learned address; shorter TTLs are
// raised to it.
const MinTTL = time.Second

// elemChunk bounds the number of set elements per netlink message.
const elemChunk = 512

// IPRule allows or denies destinations in Prefix. IPv4-mapped IPv6
// prefixes of /96 or longer are treated as IPv4.
type IPRule struct {
	Prefix netip.Prefix
	Allow  bool
}

// Entry is a learned destination address (typically an answer of the
// sandbox's resolver for an allowed name) and how long it stays allowed.
type Entry struct {
	Addr netip.Addr
	TTL  time.Duration
}

// Rules is the egress policy of one namespace. The zero value filters
// nothing and redirects nothing.
type Rules struct {
	// Enforce turns filtering on. When false, every destination is
	// allowed (an unrestricted sandbox); RedirectPort still applies.
	Enforce bool
	// IPRules are checked in order; the first whose prefix holds the
	// destination decides.
	IPRules []IPRule
	// DefaultAllow decides destinations matched by no IP rule and no
	// learned or blocked address.
	DefaultAllow bool
	// Blocked are rejected after the IP rules and before the learned
	// addresses (typically the addresses of names the policy denies,
	// under a default that allows). [Table.Block] adds more.
	Blocked []Entry
	// RedirectPort, when non-zero, redirects every outbound TCP
	// connection that passed the filter, except to loopback, to
	// 127.0.0.1:RedirectPort ([::1]:RedirectPort for IPv6) in the
	// namespace, where a transparent proxy reads the original destination
	// with [OriginalDst].
	RedirectPort uint16
	// BypassMark, when non-zero, lets packets whose socket mark is
	// BypassMark pass the filter and the redirect: the traffic of an
	// enforcer that runs inside the namespace it fences (hybox-egress in
	// a Pod: its DNS upstreams, the credential proxy's upstream
	// connections). Setting SO_MARK needs CAP_NET_ADMIN, which the
	// workload lacks.
	BypassMark uint32
	// GuardPorts are TCP ports that no socket of the namespace may
	// connect to, on any address (loopback included), unless it carries
	// BypassMark: the enforcer's control port, which only connections
	// from outside the namespace may reach. Applied whether or not
	// Enforce is set.
	GuardPorts []uint16
}

// Validate reports whether every prefix is valid.
func (r Rules) Validate() error {
	for _, p := range r.GuardPorts {
		if p == 0 {
			return errors.New("nft: guard port 0")
		}
	}
	for i, ir := range r.IPRules {
		if !ir.Prefix.IsValid() {
			return fmt.Errorf("nft: ip rule %d: invalid prefix %v", i, ir.Prefix)
		}
	}
	return nil
}

// Table is a netlink connection to nftables in one network namespace. Its
// methods are safe for concurrent use.
type Table struct {
	mu     sync.Mutex
	conn   *nftables.Conn
	nsPath string
	closed bool
}

// Open connects to nftables in the network namespace at nsPath. It does not
// change the ruleset: call [Table.Apply] for that.
//
// # Errors
//
// nsPath cannot be opened or the netlink socket cannot be created there.
func Open(nsPath string) (*Table, error) {
	conn, err := dial(nsPath)
	if err != nil {
		return nil, err
	}
	return &Table{conn: conn, nsPath: nsPath}, nil
}

// dial opens a lasting netlink connection bound to the namespace at nsPath.
// The socket keeps the namespace once created, so the file is closed here.
func dial(nsPath string) (*nftables.Conn, error) {
	fd, done, err := nsFD(nsPath)
	if err != nil {
		return nil, err
	}
	defer done()
	conn, err := nftables.New(nftables.WithNetNSFd(fd), nftables.AsLasting())
	if err != nil {
		return nil, fmt.Errorf("nft: netlink in %s: %w", nsPath, err)
	}
	return conn, nil
}

// nsFD opens the namespace at nsPath for a netlink socket: 0 (the
// caller's own namespace, no setns, so CAP_NET_ADMIN suffices) when
// nsPath names this process's namespace.
func nsFD(nsPath string) (int, func(), error) {
	fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, nil, fmt.Errorf("nft: open namespace %s: %w", nsPath, err)
	}
	if netns.Self(nsPath) {
		unix.Close(fd)
		return 0, func() {}, nil
	}
	return fd, func() { unix.Close(fd) }, nil
}

// Apply replaces the content of the table with r in one atomic batch and
// fills the learned sets with exactly learned (TTLs below [MinTTL] are
// raised to it). Until Apply succeeds for the first time the namespace
// has no hybox rules; if it fails, the previous ruleset stays in force.
//
// # Errors
//
// r or an entry is invalid, the table is closed, or the kernel rejects
// the batch.
func (t *Table) Apply(r Rules, learned []Entry) error {
	if err := r.Validate(); err != nil {
		return err
	}
	v4, v6, err := splitEntries(learned)
	if err != nil {
		return err
	}
	b4, b6, err := splitEntries(r.Blocked)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("nft: apply in %s: %w", t.nsPath, fs.ErrClosed)
	}
	err = build(t.conn, r, [2][]nftables.SetElement{v4, v6}, [2][]nftables.SetElement{b4, b6})
	if err == nil {
		err = t.conn.Flush()
	}
	if err != nil {
		return t.reset(fmt.Errorf("nft: apply in %s: %w", t.nsPath, err))
	}
	return nil
}

// Learn adds addrs to the learned sets, or refreshes them, so that each
// expires ttl from now (at least [MinTTL]). A refresh may shorten an
// address's remaining lifetime. [Table.Apply] must have succeeded first.
//
// # Errors
//
// An address is invalid, the table is closed, or the sets do not exist
// (no successful Apply yet; wraps unix.ENOENT).
func (t *Table) Learn(addrs []netip.Addr, ttl time.Duration) error {
	return t.refresh("learn", Learned4, Learned6, addrs, ttl)
}

// Block adds addrs to the blocked sets, or refreshes them, as Learn does
// for the learned sets. A blocked address is rejected unless an IP rule
// allowed it first, whether learned or not.
//
// # Errors
//
// As Learn's.
func (t *Table) Block(addrs []netip.Addr, ttl time.Duration) error {
	return t.refresh("block", Blocked4, Blocked6, addrs, ttl)
}

// refresh adds or refreshes addrs in the sets named set4 and set6.
func (t *Table) refresh(op, set4, set6 string, addrs []netip.Addr, ttl time.Duration) error {
	if len(addrs) == 0 {
		return nil
	}
	entries := make([]Entry, len(addrs))
	for i, a := range addrs {
		entries[i] = Entry{Addr: a, TTL: ttl}
	}
	v4, v6, err := splitEntries(entries)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("nft: %s in %s: %w", op, t.nsPath, fs.ErrClosed)
	}
	table := &nftables.Table{Family: nftables.TableFamilyINet, Name: TableName}
	for _, s := range []struct {
		set   *nftables.Set
		elems []nftables.SetElement
	}{
		{learnedSet(table, set4, nftables.TypeIPAddr), v4},
		{learnedSet(table, set6, nftables.TypeIP6Addr), v6},
	} {
		if len(s.elems) == 0 {
			continue
		}
		// Add (a no-op for present elements on kernels that do not
		// update timeouts), delete, add again: every element ends with
		// the new timeout, in one transaction, on any kernel.
		keys := make([]nftables.SetElement, len(s.elems))
		for i, e := range s.elems {
			keys[i] = nftables.SetElement{Key: e.Key}
		}
		err := addElements(t.conn, s.set, s.elems)
		for c := range slices.Chunk(keys, elemChunk) {
			if err == nil {
				err = t.conn.SetDeleteElements(s.set, c)
			}
		}
		if err == nil {
			err = addElements(t.conn, s.set, s.elems)
		}
		if err != nil {
			return t.reset(fmt.Errorf("nft: %s in %s: %w", op, t.nsPath, err))
		}
	}
	if err := t.conn.Flush(); err != nil {
		return t.reset(fmt.Errorf("nft: %s in %s: %w", op, t.nsPath, err))
	}
	return nil
}

// reset replaces the connection after a failed batch and returns err. The
// library keeps messages queued before an error, and marshalling errors,
// for the next batch; a fresh connection starts clean. t.mu is held.
func (t *Table) reset(err error) error {
	_ = t.conn.CloseLasting()
	conn, derr := dial(t.nsPath)
	if derr != nil {
		// Later calls fail with fs.ErrClosed rather than send leftovers.
		t.closed = true
		return errors.Join(err, derr)
	}
	t.conn = conn
	return err
}

// Close releases the netlink connection. The ruleset stays in force; use
// [Remove] to delete it. Closing twice is harmless.
func (t *Table) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	if err := t.conn.CloseLasting(); err != nil {
		return fmt.Errorf("nft: close %s: %w", t.nsPath, err)
	}
	return nil
}

// Remove deletes the hybox table in the namespace at nsPath. A missing
// table, or a missing namespace, is not an error.
//
// # Errors
//
// The namespace cannot be entered or the kernel refuses the deletion.
func Remove(nsPath string) error {
	conn, err := dial(nsPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer conn.CloseLasting()
	// Adding first makes the deletion succeed when the table is missing;
	// both happen in one transaction.
	table := &nftables.Table{Family: nftables.TableFamilyINet, Name: TableName}
	conn.AddTable(table)
	conn.DelTable(table)
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("nft: remove table in %s: %w", nsPath, err)
	}
	return nil
}

// splitEntries validates entries and turns them into set elements by
// family, one per address (the longest TTL wins).
func splitEntries(entries []Entry) (v4, v6 []nftables.SetElement, err error) {
	ttl4 := map[netip.Addr]time.Duration{}
	ttl6 := map[netip.Addr]time.Duration{}
	var order4, order6 []netip.Addr
	for _, e := range entries {
		if !e.Addr.IsValid() {
			return nil, nil, fmt.Errorf("nft: learned address %v is invalid", e.Addr)
		}
		a := e.Addr.Unmap().WithZone("")
		ttl := max(e.TTL, MinTTL)
		m, order := ttl6, &order6
		if a.Is4() {
			m, order = ttl4, &order4
		}
		old, seen := m[a]
		if !seen {
			*order = append(*order, a)
		}
		m[a] = max(old, ttl)
	}
	toElems := func(order []netip.Addr, m map[netip.Addr]time.Duration) []nftables.SetElement {
		out := make([]nftables.SetElement, len(order))
		for i, a := range order {
			out[i] = nftables.SetElement{Key: a.AsSlice(), Timeout: m[a]}
		}
		return out
	}
	return toElems(order4, ttl4), toElems(order6, ttl6), nil
}

// addElements queues elements in messages of bounded size.
func addElements(conn *nftables.Conn, s *nftables.Set, elems []nftables.SetElement) error {
	for c := range slices.Chunk(elems, elemChunk) {
		if err := conn.SetAddElements(s, c); err != nil {
			return err
		}
	}
	return nil
}
