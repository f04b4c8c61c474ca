// Package xt enforces a sandbox's egress policy with the legacy iptables
// interface (x_tables: IPT_SO_SET_REPLACE and IP6T_SO_SET_REPLACE on a raw
// socket), for a network namespace that has no nftables: gVisor's
// netstack, whose iptables is the only packet filter a process inside the
// sandbox can program. It compiles policy/nft's rule model (the policy's
// IP rules in order, learned and blocked addresses, the bypass mark, the
// guarded ports, DNS refused off loopback, the redirect to a transparent
// proxy) into the filter and nat tables of IPv4 and IPv6 and replaces
// them. What nftables does in the kernel and this interface lacks is done
// here: learned addresses expire by a timer (no set timeouts), a
// connection a stricter policy denies is cut by REJECT rules for its flow
// or its destination, found in /proc/net (no conntrack, no sock_diag: see
// cut.go), each table must fit in one replace of at most MaxBlob bytes
// (no sets: one rule per address), and a replace that fails is tried
// again until one succeeds. The marshalling follows the kernel's ABI, so
// the same tables load into Linux's ip_tables, which the tests use too.
package xt

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hybox-dev/hybox/internal/netns"
	"github.com/hybox-dev/hybox/policy/nft"
)

// ErrFull is returned (wrapped, with a *BudgetError) when the addresses
// asked for do not fit in the tables: the change is not made.
var ErrFull = errors.New("the egress firewall is full")

// families and tables, in the order of Table.socks and Table.last.
var families = [2]family{v4, v6}

const (
	filterIdx = 0
	natIdx    = 1
)

// Timing of the housekeeping.
const (
	// expirySlack is how late the timer may drop an expired address, so
	// that addresses expiring together go in one replace.
	expirySlack = 250 * time.Millisecond
	// cutCheck is how often the flows being cut are looked up again,
	// until they are gone and their rules can go too.
	cutCheck = 2 * time.Second
	// retryMin and retryMax bound the wait before a failed replace is
	// tried again; it doubles at each failure.
	retryMin = 100 * time.Millisecond
	retryMax = 10 * time.Second
)

// Table is hybox's content of the iptables of one network namespace: the
// filter and nat tables of IPv4 and, where the namespace has it, IPv6. Its
// methods are safe for concurrent use. Other rules in those tables are
// replaced: the namespace is the sandbox's.
type Table struct {
	nsPath string
	log    *slog.Logger

	mu      sync.Mutex
	closed  bool
	socks   [2]int // raw sockets, IPv4 and IPv6 (-1: no IPv6)
	rules   nft.Rules
	local   []netip.Addr
	learned map[netip.Addr]time.Time
	blocked map[netip.Addr]time.Time
	cuts    map[nft.Flow]bool
	servers map[netip.Addr]time.Time // the server's addresses, when last seen (cut.go)
	applied bool
	last    [2][2][]byte // the blobs in force, per family and table
	// dirty is set when a replace failed: the tables in force may not be
	// the model's (an expired address may still be allowed, a cut not
	// made yet), and a replace is tried again after backoff.
	dirty   bool
	backoff time.Duration
	timer   *time.Timer
	sys     sys
}

// sys is what a Table asks of the kernel (or the netstack) besides the
// tables' contents: tests put stand-ins in its place, to make a replace
// fail or to list flows of their making.
type sys struct {
	replace func(fd int, f family, blob []byte) error // replace
	sockets func(nsPath string) ([]sock, error)       // readSockets
	addrs   func(nsPath string) ([]netip.Addr, error) // localAddrs
}

// Open opens raw sockets in the network namespace at nsPath, through
// which the tables are read and replaced. It changes nothing: call
// [Table.Apply] for that. log gets the housekeeping's failures (nil
// discards them).
//
// # Errors
// The namespace cannot be entered, or a raw socket cannot be opened or
// cannot read the filter table there: that needs CAP_NET_RAW and
// CAP_NET_ADMIN, and, in gVisor, runsc's net-raw option.
func Open(nsPath string, log *slog.Logger) (*Table, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := newTable(nsPath, log)
	err := netns.Do(nsPath, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
		if err != nil {
			return fmt.Errorf("raw socket: %w (CAP_NET_RAW is needed, and in gVisor runsc's net-raw option)", err)
		}
		t.socks[0] = fd
		fd, err = unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
		switch {
		case errors.Is(err, unix.EAFNOSUPPORT):
		case err != nil:
			return fmt.Errorf("IPv6 raw socket: %w", err)
		default:
			t.socks[1] = fd
		}
		return nil
	})
	if err == nil {
		if _, err = getInfo(t.socks[0], unix.SOL_IP, "filter"); err != nil {
			err = fmt.Errorf("read the IPv4 filter table: %w (CAP_NET_ADMIN is needed)", err)
		}
	}
	if err != nil {
		t.closeSocks()
		return nil, fmt.Errorf("xt: iptables in %s: %w", nsPath, err)
	}
	return t, nil
}

func newTable(nsPath string, log *slog.Logger) *Table {
	return &Table{nsPath: nsPath, log: log, socks: [2]int{-1, -1}, learned: map[netip.Addr]time.Time{},
		blocked: map[netip.Addr]time.Time{}, cuts: map[nft.Flow]bool{}, servers: map[netip.Addr]time.Time{},
		sys: sys{replace: replace, sockets: readSockets, addrs: localAddrs}}
}

// Apply replaces the four tables with r's rules, the learned addresses
// exactly learned (TTLs below nft.MinTTL are raised to it) and the
// blocked addresses r.Blocked. Cuts in progress stay. When the tables
// change from one policy to another they are replaced one by one, filter
// before nat, so that nothing passes that the new policy denies: the
// filter refuses it, or the redirect sends it to the proxy, which asks
// [Table.Allows]. The IP rules and blocked addresses must leave room for
// the coarsest cut (see [Table.Cut]), which learned addresses make by
// going early.
//
// # Errors
// r or an entry is invalid, the table is closed, the tables would not fit
// (ErrFull), or a replace is refused; the tables in force then are the
// previous ones where the rollback succeeded (where it did not, the
// previous tables are replaced again until that succeeds).
func (t *Table) Apply(r nft.Rules, learned []nft.Entry) error {
	if err := r.Validate(); err != nil {
		return err
	}
	now := time.Now()
	l, err := expiries(learned, now)
	if err != nil {
		return err
	}
	b, err := expiries(r.Blocked, now)
	if err != nil {
		return err
	}
	local, err := t.sys.addrs(t.nsPath)
	if err != nil {
		return err
	}
	// The server pushes every policy through the agent's guarded port:
	// its address is seen here, whichever replica it is. The cuts of
	// flows that are gone go too.
	t.mu.Lock()
	cutting := len(t.cuts) > 0
	t.mu.Unlock()
	var socks []sock
	var serr error
	if len(r.GuardPorts) > 0 || cutting {
		socks, serr = t.sys.sockets(t.nsPath)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("xt: apply in %s: %w", t.nsPath, fs.ErrClosed)
	}
	if serr != nil {
		t.log.Warn("egress firewall: listing the namespace's connections", "ns", t.nsPath, "err", serr)
	}
	t.recordServersLocked(socks, r.GuardPorts, local, now)
	old := t.save()
	t.rules, t.learned, t.blocked, t.local = r, l, b, local
	if socks != nil {
		t.pruneCutsLocked(socks)
	}
	if !r.Enforce {
		clear(t.cuts)
	}
	err = t.floorLocked(now)
	if err == nil {
		err = t.commitLocked(changePolicy)
	}
	if err != nil {
		t.restore(old)
		t.scheduleLocked()
		return fmt.Errorf("xt: apply in %s: %w", t.nsPath, err)
	}
	t.applied = true
	t.scheduleLocked()
	return nil
}

// Learn allows addrs until ttl from now (at least nft.MinTTL), or longer
// if they were allowed longer already. [Table.Apply] must have succeeded
// first. The nat table is replaced before the filter, so that a
// connection to a new address goes through the proxy from its first
// packet.
//
// # Errors
// An address is invalid, the table is closed, nothing was applied yet
// (wraps unix.ENOENT), or the addresses do not fit (ErrFull: the learned
// addresses are as before).
func (t *Table) Learn(addrs []netip.Addr, ttl time.Duration) error {
	return t.add("learn", addrs, ttl, false)
}

// Block refuses addrs until ttl from now, as Learn allows them: a blocked
// address is refused unless an IP rule allows it first. The filter is
// replaced before the nat table. When the blocked addresses do not fit,
// learned addresses that expire first are dropped to make room.
//
// # Errors
// As Learn's, except that when a replace is refused the addresses stay
// blocked and the replace is tried again until it succeeds.
func (t *Table) Block(addrs []netip.Addr, ttl time.Duration) error {
	return t.add("block", addrs, ttl, true)
}

// add adds addrs to the blocked (block) or learned addresses.
func (t *Table) add(op string, addrs []netip.Addr, ttl time.Duration, block bool) error {
	if len(addrs) == 0 {
		return nil
	}
	exp := time.Now().Add(max(ttl, nft.MinTTL))
	for _, a := range addrs {
		if !a.IsValid() {
			return fmt.Errorf("xt: %s: address %v is invalid", op, a)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.closed:
		return fmt.Errorf("xt: %s in %s: %w", op, t.nsPath, fs.ErrClosed)
	case !t.applied:
		return fmt.Errorf("xt: %s in %s: nothing applied yet: %w", op, t.nsPath, unix.ENOENT)
	}
	old := t.save()
	m := t.learned
	if block {
		m = t.blocked
	}
	for _, a := range addrs {
		a = a.Unmap().WithZone("")
		if e, ok := m[a]; !ok || e.Before(exp) {
			m[a] = exp
		}
	}
	c := changeLearn
	var err error
	if block {
		c = changeTighten
		err = t.floorLocked(time.Now())
	}
	if err == nil {
		err = t.commitLocked(c)
	}
	if err != nil {
		if !block || !errors.As(err, new(*replaceError)) {
			t.restore(old)
		}
		t.scheduleLocked()
		return fmt.Errorf("xt: %s %d addresses in %s: %w", op, len(addrs), t.nsPath, err)
	}
	t.scheduleLocked()
	return nil
}

// Allows reports whether the filter would let a new TCP connection to dst
// through if it saw dst: what the transparent proxy asks, since the
// filter sees a redirected connection only at the proxy's own address.
func (t *Table) Allows(dst netip.AddrPort) bool {
	a := dst.Addr().Unmap()
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.rules
	if !r.Enforce || a.IsLoopback() {
		return true
	}
	if slices.Contains(dnsPorts, dst.Port()) {
		return false
	}
	for _, ir := range r.IPRules {
		if normalize(ir.Prefix).Contains(a) {
			return ir.Allow
		}
	}
	if e, ok := t.blocked[a]; ok && now.Before(e) {
		return false
	}
	if r.DefaultAllow {
		return true
	}
	e, ok := t.learned[a]
	return ok && now.Before(e)
}

// Close stops the housekeeping and closes the sockets. The rules stay in
// force. Closing twice is harmless.
func (t *Table) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	if t.timer != nil {
		t.timer.Stop()
	}
	t.closeSocks()
	return nil
}

func (t *Table) closeSocks() {
	for i, fd := range t.socks {
		if fd >= 0 {
			unix.Close(fd)
			t.socks[i] = -1
		}
	}
}

// snapshot is the part of a Table a failed change puts back.
type snapshot struct {
	rules            nft.Rules
	local            []netip.Addr
	learned, blocked map[netip.Addr]time.Time
	cuts             map[nft.Flow]bool
}

func (t *Table) save() snapshot {
	return snapshot{t.rules, t.local, clone(t.learned), clone(t.blocked), clone(t.cuts)}
}

func (t *Table) restore(s snapshot) {
	t.rules, t.local, t.learned, t.blocked, t.cuts = s.rules, s.local, s.learned, s.blocked, s.cuts
}

func clone[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// modelLocked is what the tables are compiled from at now: without the
// expired addresses, which stay in the maps until a commit without them
// succeeds.
func (t *Table) modelLocked(now time.Time) *model {
	m := &model{rules: t.rules, local: t.local}
	for _, set := range []struct {
		m   map[netip.Addr]time.Time
		out *[]netip.Addr
	}{{t.learned, &m.learned}, {t.blocked, &m.blocked}} {
		for a, e := range set.m {
			if now.Before(e) {
				*set.out = append(*set.out, a)
			}
		}
		slices.SortFunc(*set.out, netip.Addr.Compare)
	}
	for a := range t.servers {
		m.servers = append(m.servers, a)
	}
	slices.SortFunc(m.servers, netip.Addr.Compare)
	for f := range t.cuts {
		m.cuts = append(m.cuts, f)
	}
	slices.SortFunc(m.cuts, func(a, b nft.Flow) int {
		if c := a.Src.Compare(b.Src); c != 0 {
			return c
		}
		if c := a.Dst.Compare(b.Dst); c != 0 {
			return c
		}
		return int(a.Proto) - int(b.Proto)
	})
	return m
}

// change is what a commit puts in force, which decides the order of its
// replaces and what a failed replace leaves.
type change uint8

const (
	// changePolicy (Apply): filter first; a failed replace puts back
	// the tables it replaced, and the caller the model.
	changePolicy change = iota
	// changeLearn (Learn) loosens only: nat first, so that a new
	// address's first connection goes through the proxy; a failure as
	// changePolicy's.
	changeLearn
	// changeTighten (Block, Cut): filter first; learned addresses that
	// expire first are dropped until the tables fit; a failed replace
	// keeps what was replaced, and the model, for the retry.
	changeTighten
	// changeHousekeep (expiries, cuts that are over): filter first; a
	// failed replace keeps what was replaced, for the retry.
	changeHousekeep
)

// replaceError is a replace the kernel or the netstack refused (rather
// than tables that do not fit).
type replaceError struct{ err error }

func (e *replaceError) Error() string { return e.err.Error() }
func (e *replaceError) Unwrap() error { return e.err }

// commitLocked compiles the tables and replaces those that changed, in
// the order c wants. When a replace fails the tables are dirty: a replace
// is tried again after a backoff (scheduleLocked), until one succeeds, so
// that an expired address or a cut never stays out of force for want of
// a retry. Expired addresses leave the maps once a commit without them
// succeeded.
//
// # Errors
// ErrFull (wrapped) when the tables do not fit; *replaceError (wrapped)
// when a replace failed.
func (t *Table) commitLocked(c change) error {
	now := time.Now()
	var blobs [2][2][]byte
	stage := cutFine
	for {
		var err error
		blobs, err = t.compileLocked(now, stage)
		if err == nil {
			break
		}
		var be *BudgetError
		if !errors.As(err, &be) {
			return err
		}
		switch {
		case c == changeTighten && t.evictHelpsLocked(now, stage) && t.evictLocked():
		case stage < cutLast && len(t.cuts) > 0:
			stage++
		default:
			return full(err)
		}
	}
	order := [2]int{filterIdx, natIdx}
	if c == changeLearn {
		order = [2]int{natIdx, filterIdx}
	}
	rollback := c == changePolicy || c == changeLearn
	type done struct{ fi, ti int }
	var replaced []done
	for fi := range families {
		if t.socks[fi] < 0 {
			continue
		}
		for _, ti := range order {
			if bytes.Equal(blobs[fi][ti], t.last[fi][ti]) {
				continue
			}
			if err := t.sys.replace(t.socks[fi], families[fi], blobs[fi][ti]); err != nil {
				// Put back what this commit changed, latest first, when
				// the change is all or nothing; what stays (or could not
				// be put back) is in force.
				for i := len(replaced) - 1; i >= 0; i-- {
					d := replaced[i]
					if prev := t.last[d.fi][d.ti]; rollback && prev != nil {
						rerr := t.sys.replace(t.socks[d.fi], families[d.fi], prev)
						if rerr == nil {
							continue
						}
						err = errors.Join(err, fmt.Errorf("rollback: %w", rerr))
					}
					t.last[d.fi][d.ti] = blobs[d.fi][d.ti]
				}
				t.dirty = true
				t.backoff = min(max(2*t.backoff, retryMin), retryMax)
				return &replaceError{err}
			}
			replaced = append(replaced, done{fi, ti})
		}
	}
	for _, d := range replaced {
		t.last[d.fi][d.ti] = blobs[d.fi][d.ti]
	}
	t.dirty, t.backoff = false, 0
	for _, m := range []map[netip.Addr]time.Time{t.learned, t.blocked} {
		for a, e := range m {
			if !now.Before(e) {
				delete(m, a)
			}
		}
	}
	return nil
}

// full wraps a *BudgetError as ErrFull, saying what fits.
func full(err error) error {
	return fmt.Errorf("%w: %w (about %d addresses per family fit, for IP rules, learned and blocked addresses together)",
		ErrFull, err, (MaxBlob-6<<10)/(sizeEntry4+sizeStandard))
}

// evictLocked drops the learned addresses that expire first (an eighth,
// at least one); false when there is none left.
func (t *Table) evictLocked() bool {
	if len(t.learned) == 0 || t.rules.DefaultAllow {
		return false // under a default that allows, they take no rules
	}
	as := make([]netip.Addr, 0, len(t.learned))
	for a := range t.learned {
		as = append(as, a)
	}
	slices.SortFunc(as, func(a, b netip.Addr) int { return t.learned[a].Compare(t.learned[b]) })
	for _, a := range as[:max(1, len(as)/8)] {
		delete(t.learned, a)
	}
	t.log.Warn("egress firewall full: learned addresses dropped early to make room for a cut or a blocked address", "ns", t.nsPath, "dropped", max(1, len(as)/8))
	return true
}

// scheduleLocked sets the timer for the next expiry, or the next look at
// the flows being cut, or, while the tables are dirty, the next try.
// Nothing is scheduled before a policy was applied: there is no model to
// put in force yet.
func (t *Table) scheduleLocked() {
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
	if t.closed || !t.applied {
		return
	}
	if t.dirty {
		// Whatever falls due before then is done by that try.
		t.timer = time.AfterFunc(t.backoff, t.housekeep)
		return
	}
	var next time.Time
	for _, m := range []map[netip.Addr]time.Time{t.learned, t.blocked} {
		for _, e := range m {
			if next.IsZero() || e.Before(next) {
				next = e
			}
		}
	}
	if len(t.cuts) > 0 {
		if c := time.Now().Add(cutCheck); next.IsZero() || c.Before(next) {
			next = c
		}
	}
	if !next.IsZero() {
		t.timer = time.AfterFunc(time.Until(next)+expirySlack, t.housekeep)
	}
}

// housekeep drops expired addresses and the rules of flows that are gone,
// and tries a failed replace again.
func (t *Table) housekeep() {
	var socks []sock
	t.mu.Lock()
	cutting := len(t.cuts) > 0
	t.mu.Unlock()
	if cutting {
		var err error
		if socks, err = t.sys.sockets(t.nsPath); err != nil {
			t.log.Warn("egress firewall: listing the flows being cut", "ns", t.nsPath, "err", err)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || !t.applied {
		return
	}
	if socks != nil {
		t.pruneCutsLocked(socks)
	}
	if err := t.commitLocked(changeHousekeep); err != nil {
		t.log.Error("egress firewall: replacing the tables failed; trying again", "ns", t.nsPath, "in", t.backoff, "err", err)
	}
	t.scheduleLocked()
}

// expiries turns entries into expiry times, one per address (the longest
// wins).
func expiries(entries []nft.Entry, now time.Time) (map[netip.Addr]time.Time, error) {
	out := make(map[netip.Addr]time.Time, len(entries))
	for _, e := range entries {
		if !e.Addr.IsValid() {
			return nil, fmt.Errorf("xt: address %v is invalid", e.Addr)
		}
		a := e.Addr.Unmap().WithZone("")
		exp := now.Add(max(e.TTL, nft.MinTTL))
		if old, ok := out[a]; !ok || old.Before(exp) {
			out[a] = exp
		}
	}
	return out, nil
}

// localAddrs are the addresses of the namespace's interfaces, loopback
// excepted.
func localAddrs(nsPath string) ([]netip.Addr, error) {
	var addrs []net.Addr
	err := netns.Do(nsPath, func() (err error) {
		addrs, err = net.InterfaceAddrs()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("xt: addresses in %s: %w", nsPath, err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		p, err := netip.ParsePrefix(a.String())
		if err != nil || p.Addr().IsLoopback() {
			continue
		}
		if ad := p.Addr().Unmap().WithZone(""); !slices.Contains(out, ad) {
			out = append(out, ad)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}

// level is the socket option level of family f.
func level(f family) int {
	if f == v6 {
		return unix.SOL_IPV6
	}
	return unix.SOL_IP
}

// getInfo returns the number of entries of table name (struct
// ipt_getinfo).
func getInfo(fd, level int, name string) (uint32, error) {
	b := make([]byte, sizeGetInfo)
	copy(b, name)
	if err := getsockopt(fd, level, soGetInfo, b); err != nil {
		return 0, err
	}
	return ne.Uint32(b[76:]), nil
}

// getEntries returns the entries of table name, size bytes of them
// (struct ipt_get_entries).
func getEntries(fd, level int, name string, size uint32) ([]byte, error) {
	b := make([]byte, sizeGetHead+int(size))
	copy(b, name)
	ne.PutUint32(b[32:], size)
	if err := getsockopt(fd, level, soGetEntries, b); err != nil {
		return nil, err
	}
	return b[sizeGetHead:], nil
}

// replace replaces a table with blob: the kernel wants the number of
// entries it replaces and memory for their counters; gVisor ignores both.
// A replace that races another (EAGAIN) is tried again.
func replace(fd int, f family, blob []byte) error {
	name := cString(blob[:32])
	var err error
	for range 3 {
		var n uint32
		if n, err = getInfo(fd, level(f), name); err != nil {
			return fmt.Errorf("read the %s %s table: %w", f, name, err)
		}
		b := slices.Clone(blob)
		counters := make([]byte, sizeCounters*max(int(n), 1))
		ne.PutUint32(b[84:], n)
		ne.PutUint64(b[88:], uint64(uintptr(unsafe.Pointer(&counters[0]))))
		err = setsockopt(fd, level(f), soSetReplace, b)
		runtime.KeepAlive(counters)
		if !errors.Is(err, unix.EAGAIN) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("replace the %s %s table (%d bytes): %w", f, name, len(blob), err)
	}
	return nil
}

func getsockopt(fd, level, opt int, b []byte) error {
	l := uint32(len(b))
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt),
		uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&l)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

func setsockopt(fd, level, opt int, b []byte) error {
	_, _, errno := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt),
		uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// OriginalDst returns the destination a connection accepted by the
// transparent proxy was addressed to before the redirect
// (SO_ORIGINAL_DST, IP6T_SO_ORIGINAL_DST), as nft.OriginalDst does. In
// gVisor's netstack a connection that was not redirected (one made to the
// proxy's own address) gives EINVAL rather than its real destination,
// and every connection gives ENOTCONN until a table was replaced; the
// proxy closes such connections either way.
//
// # Errors
// As nft.OriginalDst's, plus those two.
func OriginalDst(c net.Conn) (netip.AddrPort, error) {
	return nft.OriginalDst(c)
}
