package xt

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hybox-dev/hybox/policy/nft"
)

// Cutting established flows without connection tracking. A flow the
// policy now denies is found in /proc/net (flowsToCut) and the filter
// rejects its packets from then on (HYBOX-CUT): the netstack resets the
// socket that sends one. How finely depends on what fits in the filter:
//
//   - Each flow gets a rule of its own (its addresses, ports and
//     protocol): nothing else is refused, a new connection to the same
//     address included (the policy may allow it again before an idle
//     flow is gone).
//   - When those do not fit (a rule is 200 bytes), a flow to one of the
//     server's addresses still gets a rule of its own: the server's
//     connections into the namespace (execd, the agent, proxied ports)
//     come from those addresses and must go on. Every other flow is cut
//     by its destination: a rule per address, which refuses any TCP
//     segment but a reset, and any UDP datagram, to it. No flow to such
//     an address is kept (flowsToCut keeps the server's only), and the
//     policy denies new connections to it anyway.
//   - When a rule per address does not fit, Cut drops the learned
//     addresses that expire first, if that makes them fit.
//   - Otherwise by ever shorter prefixes of the destinations, up to every
//     address (the server's excepted, and loopback and the namespace's
//     own, accepted before): flows to allowed addresses inside them are
//     cut too, and new connections to them refused, until the cut flows
//     are gone and finer rules fit. Failing closed, never open: no budget
//     leaves a denied flow alive.
//   - When even every address does not fit, Cut drops learned addresses
//     until it does, and IP rules and blocked addresses always leave room
//     for it (floorLocked), so it always fits. Only flows to the server's
//     addresses beyond what fits then wait for the next round (the cut
//     ones go at their next packet, and their rules with them); a
//     listener on their port would keep them anyway (flowsToCut).

// maxServers is how many of the server's addresses are remembered (the
// replicas, each seen when it pushes a policy): the least recently seen
// goes first.
const maxServers = 8

// Cut resets the established flows of the namespace whose peer deny
// refuses, and returns them. gVisor's netstack has no connection tracking
// to delete and no sock_diag to destroy a socket with, so the filter
// rejects the flows' packets from then on, before it accepts segments
// without SYN: the next packet the namespace sends on a flow (data, or
// the acknowledgement of data that arrives) makes the netstack reset the
// sending socket (TCP) or report the port unreachable (UDP). The peer
// learns of it when it next sends: the reset socket answers with a
// reset. A flow that stays idle on both sides stays open until then. The
// rules go once the flows are gone. Flows are found in
// /proc/net/{tcp,udp}{,6}; flows to loopback or the namespace's own
// addresses are never cut, nor the server's connections into the
// namespace; other connections into it are (see flowsToCut). Connections
// through the transparent proxy are listed too, but their rules match
// nothing: the proxy cuts them itself. Rules too many for the filter
// are replaced by coarser ones (see the comment above), so the budget
// never keeps a denied flow alive.
//
// # Errors
// The sockets cannot be listed, or a replace is refused: the cut is then
// tried again until a replace succeeds. (ErrFull only if the room Apply
// and Block keep for the coarsest cut were not there.)
func (t *Table) Cut(deny func(netip.Addr) bool) ([]nft.Flow, error) {
	socks, err := t.sys.sockets(t.nsPath)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, fmt.Errorf("xt: cut in %s: %w", t.nsPath, fs.ErrClosed)
	}
	if !t.applied || !t.rules.Enforce {
		return nil, nil
	}
	return t.cutLocked(socks, deny)
}

// cutLocked is Cut with the sockets listed.
func (t *Table) cutLocked(socks []sock, deny func(netip.Addr) bool) ([]nft.Flow, error) {
	t.recordServersLocked(socks, t.rules.GuardPorts, t.local, time.Now())
	sc := cutScope{local: map[netip.Addr]bool{}, guard: t.rules.GuardPorts, servers: map[netip.Addr]bool{}}
	for _, a := range t.local {
		sc.local[a] = true
	}
	for a := range t.servers {
		sc.servers[a] = true
	}
	flows := flowsToCut(socks, sc, deny)
	old := t.save()
	t.pruneCutsLocked(socks)
	var added []nft.Flow
	for _, f := range flows {
		if !t.cuts[f] {
			t.cuts[f] = true
			added = append(added, f)
		}
	}
	err := t.commitLocked(changeTighten)
	if err != nil && !errors.As(err, new(*replaceError)) {
		t.restore(old)
		t.scheduleLocked()
		return nil, fmt.Errorf("xt: cut %d flows in %s: %w", len(added), t.nsPath, err)
	}
	t.scheduleLocked()
	if err != nil {
		return added, fmt.Errorf("xt: cut %d flows in %s (tried again until it succeeds): %w", len(added), t.nsPath, err)
	}
	return added, nil
}

// recordServersLocked remembers the addresses that socks shows connected
// to a port of guard (serverPeers), as seen at now.
func (t *Table) recordServersLocked(socks []sock, guard []uint16, local []netip.Addr, now time.Time) {
	if len(guard) == 0 {
		return
	}
	lm := map[netip.Addr]bool{}
	for _, a := range local {
		lm[a] = true
	}
	for _, a := range serverPeers(socks, guard, lm) {
		t.servers[a] = now
	}
	for len(t.servers) > maxServers {
		var oldest netip.Addr
		for a, seen := range t.servers {
			if !oldest.IsValid() || seen.Before(t.servers[oldest]) {
				oldest = a
			}
		}
		delete(t.servers, oldest)
	}
}

// cutStage is how coarse a commit may cut (see the comment above).
type cutStage uint8

const (
	// cutFine: a rule per flow, or per destination (but the server's).
	cutFine cutStage = iota
	// cutCoarse: prefixes of the destinations, up to every address.
	cutCoarse
	// cutLast: besides, flows to the server's addresses that do not
	// fit wait.
	cutLast
)

// compileLocked encodes the four tables of the model at now, cutting as
// coarsely as stage allows and the budget needs.
func (t *Table) compileLocked(now time.Time, stage cutStage) ([2][2][]byte, error) {
	m := t.modelLocked(now)
	var blobs [2][2][]byte
	for fi, f := range families {
		if t.socks[fi] < 0 {
			continue
		}
		var err error
		if blobs[fi][filterIdx], err = t.filterLocked(m, f, stage); err != nil {
			return blobs, err
		}
		if blobs[fi][natIdx], err = m.nat(f).encode(); err != nil {
			return blobs, err
		}
	}
	return blobs, nil
}

// evictHelpsLocked reports whether to drop learned addresses to make the
// tables fit at stage. At cutFine only if the tables would fit with none
// left: otherwise prefixes are needed anyway, and they are tried before
// dropping any (each costs something: a prefix the allowed flows inside
// it, a learned address dropped early the new connections to it until
// its name is resolved again).
func (t *Table) evictHelpsLocked(now time.Time, stage cutStage) bool {
	if stage != cutFine {
		return true
	}
	learned := t.learned
	t.learned = nil
	_, err := t.compileLocked(now, cutFine)
	t.learned = learned
	return err == nil
}

// filterLocked encodes the filter of family f of m, its flows cut the
// finest way that fits and stage allows.
//
// # Errors
// A *BudgetError when the cut stage allows does not fit.
func (t *Table) filterLocked(m *model, f family, stage cutStage) ([]byte, error) {
	servers := map[netip.Addr]bool{}
	for _, a := range m.servers {
		servers[a] = true
	}
	var all, exact []nft.Flow
	var dsts []netip.Addr
	for _, fl := range m.cuts {
		a := fl.Dst.Addr()
		if !inFamily1(a, f) {
			continue
		}
		all = append(all, fl)
		if servers[a] {
			exact = append(exact, fl)
		} else {
			dsts = append(dsts, a)
		}
	}
	mf := *m
	try := func(flows []nft.Flow, nets []netip.Prefix) ([]byte, error) {
		mf.cuts, mf.cutNets = flows, nets
		return mf.filter(f).encode()
	}
	// A rule per flow: nothing but the flows is refused.
	blob, err := try(all, nil)
	if err == nil || !errors.As(err, new(*BudgetError)) || len(dsts) == 0 && stage < cutLast {
		return blob, err
	}
	levels := cutLevels(f)
	if stage == cutFine {
		levels = levels[:1]
	}
	prev := -1
	for _, bits := range levels {
		nets := prefixesOf(dsts, bits)
		if len(nets) == prev {
			continue // no fewer rules than the level before
		}
		prev = len(nets)
		if blob, err = try(exact, nets); err == nil || !errors.As(err, new(*BudgetError)) {
			return blob, err
		}
	}
	if stage < cutLast {
		return nil, err
	}
	// The most flows to the server's addresses that fit beside every
	// other destination cut.
	nets := prefixesOf(dsts, 0)
	fits := sortSearch(len(exact), func(k int) bool { _, err := try(exact[:k], nets); return err == nil })
	if fits < 0 {
		return nil, err
	}
	t.log.Warn("egress firewall full: flows to the server's addresses wait to be cut until others are gone",
		"ns", t.nsPath, "family", f.String(), "waiting", len(exact)-fits)
	return try(exact[:fits], nets)
}

// sortSearch is the largest k in [0, n] for which ok holds, ok being
// true up to some k and false after; -1 when ok(0) is false.
func sortSearch(n int, ok func(int) bool) int {
	lo, hi := -1, n+1 // ok(lo) holds (or lo is -1), ok(hi) does not (or hi is n+1)
	for hi-lo > 1 {
		mid := int(uint(lo+hi) >> 1)
		if mid >= 0 && ok(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// cutLevels are the prefix lengths that destinations of family f are cut
// by, finest first: the addresses themselves, then every 4 bits (IPv4)
// or 8 (IPv6) down to every address.
func cutLevels(f family) []int {
	bits, step := 32, 4
	if f == v6 {
		bits, step = 128, 8
	}
	var out []int
	for b := bits; b >= 0; b -= step {
		out = append(out, b)
	}
	return out
}

// prefixesOf are the distinct prefixes of length bits of addrs, sorted.
func prefixesOf(addrs []netip.Addr, bits int) []netip.Prefix {
	var out []netip.Prefix
	for _, a := range addrs {
		p := netip.PrefixFrom(a, bits).Masked()
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return out
}

// floorLocked checks that the coarsest cut fits in the filter of the
// model's rules and blocked addresses: every destination cut, with a
// return for each of maxServers server addresses, once every learned
// address is gone (a cut drops them to make room). Without that room a
// cut could fail for the budget and leave denied flows alive.
//
// # Errors
// ErrFull (wrapped) when it does not fit.
func (t *Table) floorLocked(now time.Time) error {
	if !t.rules.Enforce {
		return nil
	}
	m := t.modelLocked(now)
	m.learned, m.cuts = nil, nil
	for fi, f := range families {
		if t.socks[fi] < 0 {
			continue
		}
		mf := *m
		any4, any6 := netip.IPv4Unspecified(), netip.IPv6Unspecified()
		mf.cutNets = []netip.Prefix{netip.PrefixFrom(any4, 0), netip.PrefixFrom(any6, 0)}
		mf.servers = nil
		for i := range maxServers {
			// Stand-ins: only their number counts.
			a := netip.AddrFrom4([4]byte{192, 0, 2, byte(i + 1)})
			if f == v6 {
				a = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(i + 1)})
			}
			mf.servers = append(mf.servers, a)
		}
		if _, err := mf.filter(f).encode(); err != nil {
			if errors.As(err, new(*BudgetError)) {
				return fmt.Errorf("%w (with room for cutting established connections)", full(err))
			}
			return err
		}
	}
	return nil
}

// pruneCutsLocked forgets the cut flows that socks no longer lists as
// able to send.
func (t *Table) pruneCutsLocked(socks []sock) {
	live := map[nft.Flow]bool{}
	for _, s := range socks {
		if s.proto == unix.IPPROTO_TCP && sending(s.state) || s.proto == unix.IPPROTO_UDP && s.state == udpConnected {
			live[nft.Flow{Proto: s.proto, Src: s.local, Dst: s.remote}] = true
		}
	}
	for f := range t.cuts {
		if !live[f] {
			delete(t.cuts, f)
		}
	}
}
