package xt

import (
	"net/netip"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/hybox-dev/hybox/policy/nft"
)

// Chains hybox adds to the tables.
const (
	chainGuard = "HYBOX-GUARD" // filter: the guarded ports
	chainOut   = "HYBOX-OUT"   // filter: the policy
	chainDeny  = "HYBOX-DENY"  // filter: reject
	chainCut   = "HYBOX-CUT"   // filter: the flows being cut
	chainReset = "HYBOX-RESET" // filter: reset a cut prefix's flows
	chainRedir = "HYBOX-REDIR" // nat: which TCP goes to the proxy
	chainProxy = "HYBOX-PROXY" // nat: the redirect
)

// dnsPorts are DNS and DNS over TLS/QUIC, refused off loopback.
var dnsPorts = []uint16{53, 853}

// model is what the four tables are compiled from: the rules, the
// namespace's own addresses, the unexpired learned and blocked
// addresses, and the flows being cut (cut.go): cuts by a rule each, and
// every flow to cutNets except to the servers' addresses inside them.
type model struct {
	rules   nft.Rules
	local   []netip.Addr
	learned []netip.Addr
	blocked []netip.Addr
	cuts    []nft.Flow
	cutNets []netip.Prefix
	servers []netip.Addr
}

// The layout, per family (v6 the same with ::1/128 and ICMPv6 neighbour
// discovery). In the filter table's OUTPUT chain:
//
//	-j HYBOX-GUARD                     (with guard ports)
//	-j HYBOX-OUT                       (when enforcing)
//	HYBOX-GUARD: -m mark --mark M -j RETURN
//	             -d 127.0.0.1 -p tcp --dport P -j RETURN
//	             -p tcp --dport P --tcp-flags RST NONE -j REJECT --reject-with tcp-reset
//	             -p tcp --sport P --tcp-flags SYN,ACK SYN -j REJECT --reject-with tcp-reset
//	HYBOX-OUT:   -m mark --mark M -j ACCEPT
//	             -o lo -j ACCEPT; -d 127.0.0.0/8 -j ACCEPT; -d <own address> -j ACCEPT
//	             -j HYBOX-CUT                       (while flows are being cut)
//	             -p tcp --tcp-flags SYN NONE -j ACCEPT
//	             -p tcp --tcp-flags SYN,ACK SYN,ACK -j ACCEPT
//	             -p tcp|udp --dport 53|853 -j HYBOX-DENY
//	             <IP rules in order: -d P -j ACCEPT|HYBOX-DENY>
//	             <blocked: -d A -j HYBOX-DENY> <learned, default deny only: -d A -j ACCEPT>
//	             -j ACCEPT|HYBOX-DENY
//	HYBOX-DENY:  -p tcp -j REJECT --reject-with tcp-reset
//	             -p udp -j REJECT --reject-with icmp-port-unreachable
//	             -j DROP
//	HYBOX-CUT:   <cut flows: -s -d -p --sport --dport (TCP without RST) -j REJECT>
//	             <servers inside a prefix below: -d S -j RETURN>
//	             <cut prefixes: -d P -j HYBOX-RESET>
//	HYBOX-RESET: -p tcp --tcp-flags RST RST -j RETURN
//	             -p tcp -j REJECT --reject-with tcp-reset
//	             -p udp -j REJECT --reject-with icmp-port-unreachable
//
// In the nat table's OUTPUT chain (the guard with guard ports, the
// redirect with a redirect port):
//
//	-p tcp -j HYBOX-GUARD
//	-p tcp -j HYBOX-REDIR
//	HYBOX-GUARD: -m mark --mark M -j RETURN
//	             -p tcp --dport P -j REDIRECT --to-ports P   (to loopback, where nothing listens on P)
//	HYBOX-REDIR: -m mark --mark M -j RETURN
//	             -o lo -j RETURN; -d 127.0.0.0/8 -j RETURN; -d <own address> -j RETURN
//	             -p tcp --dport 53|853 -j RETURN
//	             <IP rules: -d P -j HYBOX-PROXY|RETURN> <blocked: RETURN>
//	             <learned, default deny only: -j HYBOX-PROXY> <default allow: -j HYBOX-PROXY>
//	HYBOX-PROXY: -p tcp -j REDIRECT --to-ports N
//
// The nat table runs before the filter on output, and the filter then
// sees a redirected connection at 127.0.0.1:N: so the redirect takes only
// what the filter would accept, and leaves the rest to it (a connection
// the policy denies is refused, not redirected). The filter accepts TCP
// segments without SYN, and SYN-ACKs, before the long part of the list:
// there is no connection state to match, and a new outbound connection
// always starts with a bare SYN, which walks the list. The guard refuses
// a bare SYN from a guarded port, so that a connection on that port is
// always one the agent accepted (see serverPeers).

// filter is the filter table of family f.
func (m *model) filter(f family) *table {
	r := m.rules
	t := &table{name: "filter", family: f, hooks: filterHooks, chains: []chain{
		{name: hookNames[hookLocalIn], hook: hookLocalIn, policy: tAccept},
		{name: hookNames[hookForward], hook: hookForward, policy: tAccept},
		{name: hookNames[hookLocalOut], hook: hookLocalOut, policy: tAccept},
	}}
	output := &t.chains[2]
	var user []chain
	if len(r.GuardPorts) > 0 {
		output.rules = append(output.rules, rule{target: jump(chainGuard)})
		g := chain{name: chainGuard, hook: -1}
		if r.BypassMark != 0 {
			g.rules = append(g.rules, markRule(r.BypassMark, tReturn))
		}
		for _, p := range r.GuardPorts {
			// The nat table sent it to loopback, where nothing listens
			// on the port: the netstack itself refuses it.
			g.rules = append(g.rules, rule{dst: host(loopbackHost(f)), proto: unix.IPPROTO_TCP,
				matches: []match{tcpMatch(p, 0, 0)}, target: target{kind: tReturn}})
			// Not resets: the reset that the next rule answers a SYN with
			// comes back to the port.
			g.rules = append(g.rules, rule{proto: unix.IPPROTO_TCP, matches: []match{tcpMatch(p, tcpRST, 0)}, target: reset(f)})
			// No connection from the port: one on it is always inbound.
			from := tcpMatch(0, tcpSYN|tcpACK, tcpSYN)
			from.sport = [2]uint16{p, p}
			g.rules = append(g.rules, rule{proto: unix.IPPROTO_TCP, matches: []match{from}, target: reset(f)})
		}
		user = append(user, g)
	}
	if r.Enforce {
		output.rules = append(output.rules, rule{target: jump(chainOut)})
		cut, cutting := m.cut(f)
		user = append(user, m.out(f, cutting), deny(f))
		if cutting {
			user = append(user, cut)
			if slices.ContainsFunc(m.cutNets, func(p netip.Prefix) bool { return inFamily1(p.Addr(), f) }) {
				user = append(user, resetChain(f))
			}
		}
	}
	t.chains = append(t.chains, sortChains(user)...)
	return t
}

// out is the HYBOX-OUT chain of family f, which jumps to HYBOX-CUT when
// cutting.
func (m *model) out(f family, cutting bool) chain {
	r := m.rules
	c := chain{name: chainOut, hook: -1}
	add := func(rs ...rule) { c.rules = append(c.rules, rs...) }
	accept := target{kind: tAccept}
	if r.BypassMark != 0 {
		add(markRule(r.BypassMark, tAccept))
	}
	add(rule{out: "lo", target: accept}, rule{dst: loopback(f), target: accept})
	for _, a := range inFamily(m.local, f) {
		add(rule{dst: host(a), target: accept})
	}
	if cutting {
		add(rule{target: jump(chainCut)})
	}
	add(rule{proto: unix.IPPROTO_TCP, matches: []match{tcpMatch(0, tcpSYN, 0)}, target: accept},
		rule{proto: unix.IPPROTO_TCP, matches: []match{tcpMatch(0, tcpSYN|tcpACK, tcpSYN|tcpACK)}, target: accept})
	for _, p := range dnsPorts {
		add(rule{proto: unix.IPPROTO_TCP, matches: []match{tcpMatch(p, 0, 0)}, target: jump(chainDeny)},
			rule{proto: unix.IPPROTO_UDP, matches: []match{udpMatch(p)}, target: jump(chainDeny)})
	}
	if f == v6 {
		// Neighbour discovery (IPv6's ARP) that the netstack answers
		// through the filter: to link-local and link-scope multicast
		// addresses only, which never leave the link.
		for _, p := range []string{"fe80::/10", "ff02::/16"} {
			add(rule{dst: netip.MustParsePrefix(p), proto: unix.IPPROTO_ICMPV6, target: accept})
		}
	}
	for _, ir := range r.IPRules {
		p := normalize(ir.Prefix)
		if !inFamily1(p.Addr(), f) {
			continue
		}
		t := jump(chainDeny)
		if ir.Allow {
			t = accept
		}
		add(rule{dst: anyIfZero(p), target: t})
	}
	for _, a := range inFamily(m.blocked, f) {
		add(rule{dst: host(a), target: jump(chainDeny)})
	}
	if !r.DefaultAllow {
		for _, a := range inFamily(m.learned, f) {
			add(rule{dst: host(a), target: accept})
		}
		add(rule{target: jump(chainDeny)})
	} else {
		add(rule{target: accept})
	}
	return c
}

// cut is the HYBOX-CUT chain of family f; false when nothing of f is
// being cut.
func (m *model) cut(f family) (chain, bool) {
	c := chain{name: chainCut, hook: -1}
	for _, fl := range m.cuts {
		if !inFamily1(fl.Dst.Addr(), f) {
			continue
		}
		cut := rule{src: host(fl.Src.Addr()), dst: host(fl.Dst.Addr()), proto: fl.Proto}
		ports := func(mt match) match {
			mt.sport = [2]uint16{fl.Src.Port(), fl.Src.Port()}
			mt.dport = [2]uint16{fl.Dst.Port(), fl.Dst.Port()}
			return mt
		}
		if fl.Proto == unix.IPPROTO_TCP {
			// Not its resets: a socket the cut reset answers the peer's
			// next segment with one, which must reach the peer.
			cut.matches = []match{ports(tcpMatch(0, tcpRST, 0))}
			cut.target = reset(f)
		} else {
			cut.matches = []match{ports(udpMatch(0))}
			cut.target = unreachable(f)
		}
		c.rules = append(c.rules, cut)
	}
	var nets []netip.Prefix
	for _, p := range m.cutNets {
		if inFamily1(p.Addr(), f) {
			nets = append(nets, p)
		}
	}
	// The servers' connections go on through a prefix that holds their
	// addresses: back to HYBOX-OUT, which accepts what is not a new
	// connection.
	for _, s := range inFamily(m.servers, f) {
		if slices.ContainsFunc(nets, func(p netip.Prefix) bool { return p.Contains(s) }) {
			c.rules = append(c.rules, rule{dst: host(s), target: target{kind: tReturn}})
		}
	}
	for _, p := range nets {
		c.rules = append(c.rules, rule{dst: anyIfZero(p), target: jump(chainReset)})
	}
	return c, len(c.rules) > 0
}

// resetChain is the HYBOX-RESET chain: every packet of a cut prefix but
// a TCP reset (which a reset socket sends the peer) is refused.
func resetChain(f family) chain {
	return chain{name: chainReset, hook: -1, rules: []rule{
		{proto: unix.IPPROTO_TCP, matches: []match{tcpMatch(0, tcpRST, tcpRST)}, target: target{kind: tReturn}},
		{proto: unix.IPPROTO_TCP, target: reset(f)},
		{proto: unix.IPPROTO_UDP, target: unreachable(f)},
	}}
}

// deny is the HYBOX-DENY chain: a denied packet is refused at once
// (gVisor's netstack has no administratively-prohibited reject).
func deny(f family) chain {
	return chain{name: chainDeny, hook: -1, rules: []rule{
		{proto: unix.IPPROTO_TCP, target: reset(f)},
		{proto: unix.IPPROTO_UDP, target: unreachable(f)},
		{target: target{kind: tDrop}},
	}}
}

// nat is the nat table of family f.
func (m *model) nat(f family) *table {
	r := m.rules
	t := &table{name: "nat", family: f, hooks: natHooks, chains: []chain{
		{name: hookNames[hookPreRouting], hook: hookPreRouting, policy: tAccept},
		{name: hookNames[hookLocalIn], hook: hookLocalIn, policy: tAccept},
		{name: hookNames[hookLocalOut], hook: hookLocalOut, policy: tAccept},
		{name: hookNames[hookPostRouting], hook: hookPostRouting, policy: tAccept},
	}}
	var user []chain
	if len(r.GuardPorts) > 0 {
		// Every local connection to a guarded port goes to the same port
		// on loopback, where nothing listens (the agent listens on the
		// Pod's address only), so it is refused at once: a REJECT in
		// gVisor's filter answers nothing for local destinations (it
		// checks a checksum the netstack leaves out on loopback), and
		// the filter's guard would only drop it.
		t.chains[2].rules = append(t.chains[2].rules, rule{proto: unix.IPPROTO_TCP, target: jump(chainGuard)})
		g := chain{name: chainGuard, hook: -1}
		if r.BypassMark != 0 {
			g.rules = append(g.rules, markRule(r.BypassMark, tReturn))
		}
		for _, p := range r.GuardPorts {
			g.rules = append(g.rules, rule{proto: unix.IPPROTO_TCP, matches: []match{tcpMatch(p, 0, 0)},
				target: target{kind: tRedirect, port: p}})
		}
		user = append(user, g)
	}
	if r.RedirectPort == 0 {
		t.chains = append(t.chains, sortChains(user)...)
		return t
	}
	t.chains[2].rules = append(t.chains[2].rules, rule{proto: unix.IPPROTO_TCP, target: jump(chainRedir)})
	redir := chain{name: chainRedir, hook: -1}
	add := func(rs ...rule) { redir.rules = append(redir.rules, rs...) }
	ret, proxy := target{kind: tReturn}, jump(chainProxy)
	if r.BypassMark != 0 {
		add(markRule(r.BypassMark, tReturn))
	}
	add(rule{out: "lo", target: ret}, rule{dst: loopback(f), target: ret})
	for _, a := range inFamily(m.local, f) {
		add(rule{dst: host(a), target: ret})
	}
	if r.Enforce {
		for _, p := range dnsPorts {
			add(rule{proto: unix.IPPROTO_TCP, matches: []match{tcpMatch(p, 0, 0)}, target: ret})
		}
		for _, ir := range r.IPRules {
			p := normalize(ir.Prefix)
			if !inFamily1(p.Addr(), f) {
				continue
			}
			t := ret
			if ir.Allow {
				t = proxy
			}
			add(rule{dst: anyIfZero(p), target: t})
		}
		for _, a := range inFamily(m.blocked, f) {
			add(rule{dst: host(a), target: ret})
		}
		if !r.DefaultAllow {
			for _, a := range inFamily(m.learned, f) {
				add(rule{dst: host(a), target: proxy})
			}
		} else {
			add(rule{target: proxy})
		}
	} else {
		add(rule{target: proxy})
	}
	user = append(user, redir, chain{name: chainProxy, hook: -1, rules: []rule{
		{proto: unix.IPPROTO_TCP, target: target{kind: tRedirect, port: r.RedirectPort}},
	}})
	t.chains = append(t.chains, sortChains(user)...)
	return t
}

// sortChains orders user chains by name, as iptables does.
func sortChains(cs []chain) []chain {
	slices.SortFunc(cs, func(a, b chain) int {
		switch {
		case a.name < b.name:
			return -1
		case a.name > b.name:
			return 1
		}
		return 0
	})
	return cs
}

func jump(name string) target { return target{kind: tJump, chain: name} }

func markRule(mark uint32, t targetKind) rule {
	return rule{matches: []match{{kind: mMark, mark: mark}}, target: target{kind: t}}
}

func reset(f family) target {
	if f == v6 {
		return target{kind: tReject, with: reject6TCPReset}
	}
	return target{kind: tReject, with: reject4TCPReset}
}

func unreachable(f family) target {
	if f == v6 {
		return target{kind: tReject, with: reject6PortUnreachable}
	}
	return target{kind: tReject, with: reject4PortUnreachable}
}

// loopbackHost is where REDIRECT sends a local connection: 127.0.0.1 or
// ::1.
func loopbackHost(f family) netip.Addr {
	if f == v6 {
		return netip.IPv6Loopback()
	}
	return netip.MustParseAddr("127.0.0.1")
}

func loopback(f family) netip.Prefix {
	if f == v6 {
		return netip.MustParsePrefix("::1/128")
	}
	return netip.MustParsePrefix("127.0.0.0/8")
}

// anyIfZero is p, or no prefix (every address of the table's family)
// for a /0, as the kernel stores it.
func anyIfZero(p netip.Prefix) netip.Prefix {
	if p.Bits() == 0 {
		return netip.Prefix{}
	}
	return p
}

// host is the prefix of a alone.
func host(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

func inFamily1(a netip.Addr, f family) bool { return a.Is4() == (f == v4) }

// inFamily are the addresses of family f among as.
func inFamily(as []netip.Addr, f family) []netip.Addr {
	var out []netip.Addr
	for _, a := range as {
		if inFamily1(a, f) {
			out = append(out, a)
		}
	}
	return out
}

// normalize masks p and turns IPv4-mapped prefixes of /96 or longer into
// IPv4 prefixes (as policy/nft does).
func normalize(p netip.Prefix) netip.Prefix {
	p = p.Masked()
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p
}
