package xt

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
)

// family is the address family of a table.
type family uint8

const (
	v4 family = 4
	v6 family = 6
)

func (f family) String() string {
	if f == v6 {
		return "IPv6"
	}
	return "IPv4"
}

// targetKind is what a rule does with a packet it matches.
type targetKind uint8

const (
	tAccept targetKind = iota + 1
	tDrop
	tReturn
	tJump     // to a user chain
	tReject   // with a TCP reset or an ICMP port unreachable
	tRedirect // to a local port (nat)
	tError    // a user chain's header, or the table's end
)

// target is a rule's target.
type target struct {
	kind  targetKind
	chain string // tJump: the chain; tError: the chain's name
	with  uint32 // tReject: the family's reject kind
	port  uint16 // tRedirect
}

// matchKind is an extension match.
type matchKind uint8

const (
	mTCP matchKind = iota + 1
	mUDP
	mMark
)

// anyPort is the port range every port is in.
var anyPort = [2]uint16{0, 0xffff}

// match is an extension match: tcp or udp ports (and TCP flags), or the
// packet's mark.
type match struct {
	kind              matchKind
	sport, dport      [2]uint16
	flagMask, flagCmp uint8  // tcp
	mark              uint32 // mark, compared under a full mask
}

// tcpMatch matches TCP segments to port dport (0: any) whose flags under
// mask equal cmp.
func tcpMatch(dport uint16, mask, cmp uint8) match {
	m := match{kind: mTCP, sport: anyPort, dport: anyPort, flagMask: mask, flagCmp: cmp}
	if dport != 0 {
		m.dport = [2]uint16{dport, dport}
	}
	return m
}

// udpMatch matches UDP datagrams to port dport (0: any).
func udpMatch(dport uint16) match {
	m := match{kind: mUDP, sport: anyPort, dport: anyPort}
	if dport != 0 {
		m.dport = [2]uint16{dport, dport}
	}
	return m
}

// rule is one entry of a chain. Zero prefixes and an empty interface
// match everything.
type rule struct {
	src, dst netip.Prefix
	out      string
	proto    uint8
	matches  []match
	target   target
}

// chain is a builtin chain (hook ≥ 0, ending with its policy) or a user
// chain (hook -1, which the encoding opens with a header and closes with
// an unconditional RETURN).
type chain struct {
	name   string
	hook   int
	policy targetKind // builtin chains: tAccept or tDrop
	rules  []rule
}

// table is the whole content of one table of one family.
type table struct {
	name   string // "filter" or "nat"
	family family
	hooks  uint32 // the table's valid hooks
	chains []chain
}

// Valid hooks of the tables hybox replaces.
const (
	filterHooks = 1<<hookLocalIn | 1<<hookForward | 1<<hookLocalOut
	natHooks    = 1<<hookPreRouting | 1<<hookLocalIn | 1<<hookLocalOut | 1<<hookPostRouting
)

// targetSize is the encoded size of t in family f.
func targetSize(t target, f family) int {
	switch t.kind {
	case tReject:
		return sizeReject
	case tRedirect:
		if f == v6 {
			return sizeRedirect6
		}
		return sizeRedirect4
	case tError:
		return sizeError
	default:
		return sizeStandard
	}
}

// size is the encoded size of r in family f.
func (r *rule) size(f family) int {
	return f.layout().size + len(r.matches)*sizeTCPMatch + targetSize(r.target, f)
}

// BudgetError is returned (wrapped) when a table does not fit in one
// replace (MaxBlob bytes): too many rules for gVisor's netstack.
type BudgetError struct {
	Table string // e.g. "IPv4 filter"
	Size  int    // the bytes it needs, header included
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("the %s table needs %d bytes, more than the %d one replace may carry", e.Table, e.Size, MaxBlob)
}

// encode lays t out as the option of IPT_SO_SET_REPLACE (or
// IP6T_SO_SET_REPLACE), without the counters (num_counters and the
// counters pointer are zero; apply sets them).
//
// # Errors
// A jump to a chain t does not have, a builtin chain without a hook, or
// a blob larger than MaxBlob (*BudgetError).
func (t *table) encode() ([]byte, error) {
	f := t.family
	lay := f.layout()
	rulesEnd := func(c *chain) int { // entries of c, header and end included
		n := 0
		if c.hook < 0 {
			n += lay.size + sizeError
		}
		for i := range c.rules {
			n += c.rules[i].size(f)
		}
		return n + lay.size + sizeStandard // RETURN or the policy
	}
	// First pass: where each chain begins.
	start := map[string]int{}
	var hookEntry, underflow [numHooks]uint32
	off := 0
	for i := range t.chains {
		c := &t.chains[i]
		if _, dup := start[c.name]; dup {
			return nil, fmt.Errorf("xt: %s %s: chain %s twice", f, t.name, c.name)
		}
		first := off
		if c.hook < 0 {
			first += lay.size + sizeError
		} else {
			if c.hook >= numHooks || t.hooks&(1<<c.hook) == 0 {
				return nil, fmt.Errorf("xt: %s %s: chain %s has no valid hook", f, t.name, c.name)
			}
			hookEntry[c.hook] = uint32(first)
		}
		start[c.name] = first
		off += rulesEnd(c)
		if c.hook >= 0 {
			underflow[c.hook] = uint32(off - lay.size - sizeStandard)
		}
	}
	for h := range numHooks {
		if t.hooks&(1<<h) != 0 && !slices.ContainsFunc(t.chains, func(c chain) bool { return c.hook == h }) {
			return nil, fmt.Errorf("xt: %s %s: no chain for hook %s", f, t.name, hookNames[h])
		}
	}
	total := off + lay.size + sizeError // the closing ERROR entry
	if sizeReplace+total > MaxBlob {
		return nil, &BudgetError{Table: f.String() + " " + t.name, Size: sizeReplace + total}
	}

	b := make([]byte, sizeReplace+total)
	copy(b[0:32], t.name)
	ne.PutUint32(b[32:], t.hooks)
	ne.PutUint32(b[40:], uint32(total))
	for h := 0; h < numHooks; h++ {
		ne.PutUint32(b[44+4*h:], hookEntry[h])
		ne.PutUint32(b[64+4*h:], underflow[h])
	}
	e := b[sizeReplace:]
	n := 0
	put := func(r *rule) error {
		size := r.size(f)
		if err := encodeRule(e[:size], r, f, start); err != nil {
			return fmt.Errorf("xt: %s %s: %w", f, t.name, err)
		}
		e = e[size:]
		n++
		return nil
	}
	for i := range t.chains {
		c := &t.chains[i]
		if c.hook < 0 {
			if err := put(&rule{target: target{kind: tError, chain: c.name}}); err != nil {
				return nil, err
			}
		}
		for j := range c.rules {
			if err := put(&c.rules[j]); err != nil {
				return nil, err
			}
		}
		end := rule{target: target{kind: tReturn}}
		if c.hook >= 0 {
			end.target.kind = c.policy
		}
		if err := put(&end); err != nil {
			return nil, err
		}
	}
	if err := put(&rule{target: target{kind: tError, chain: nameError}}); err != nil {
		return nil, err
	}
	ne.PutUint32(b[36:], uint32(n))
	return b, nil
}

// encodeRule writes r into b, which has exactly r's size.
func encodeRule(b []byte, r *rule, f family, start map[string]int) error {
	lay := f.layout()
	for _, p := range []struct {
		prefix     netip.Prefix
		addr, mask int
	}{{r.src, lay.src, lay.smsk}, {r.dst, lay.dst, lay.dmsk}} {
		if !p.prefix.IsValid() {
			continue
		}
		a := p.prefix.Addr()
		if a.Is4() != (f == v4) {
			return fmt.Errorf("address %v in a table of %s", a, f)
		}
		copy(b[p.addr:p.addr+lay.addrLen], a.AsSlice())
		putMask(b[p.mask:p.mask+lay.addrLen], p.prefix.Bits())
	}
	if r.out != "" {
		if len(r.out) > 15 {
			return fmt.Errorf("interface name %q is too long", r.out)
		}
		copy(b[lay.outiface:lay.outiface+16], r.out)
		for i := 0; i <= len(r.out); i++ {
			b[lay.outifaceMask+i] = 0xff
		}
	}
	ne.PutUint16(b[lay.proto:], uint16(r.proto))
	if r.proto != 0 {
		b[lay.flags] = lay.protoFlag
	}
	m := b[lay.size:]
	for _, x := range r.matches {
		switch x.kind {
		case mTCP:
			putHeader(m, sizeTCPMatch, nameTCP, 0)
			ne.PutUint16(m[32:], x.sport[0])
			ne.PutUint16(m[34:], x.sport[1])
			ne.PutUint16(m[36:], x.dport[0])
			ne.PutUint16(m[38:], x.dport[1])
			m[41], m[42] = x.flagMask, x.flagCmp
		case mUDP:
			putHeader(m, sizeUDPMatch, nameUDP, 0)
			ne.PutUint16(m[32:], x.sport[0])
			ne.PutUint16(m[34:], x.sport[1])
			ne.PutUint16(m[36:], x.dport[0])
			ne.PutUint16(m[38:], x.dport[1])
		case mMark:
			putHeader(m, sizeMarkMatch, nameMark, markRevision)
			ne.PutUint32(m[32:], x.mark)
			ne.PutUint32(m[36:], 0xffffffff)
		default:
			return fmt.Errorf("unknown match %d", x.kind)
		}
		m = m[sizeTCPMatch:]
	}
	targetOff := len(b) - len(m)
	ne.PutUint16(b[lay.targetOffset:], uint16(targetOff))
	ne.PutUint16(b[lay.nextOffset:], uint16(len(b)))
	tg := r.target
	switch tg.kind {
	case tAccept, tDrop, tReturn, tJump:
		putHeader(m, sizeStandard, "", 0)
		v := map[targetKind]int32{tAccept: verdictAccept, tDrop: verdictDrop, tReturn: verdictReturn}[tg.kind]
		if tg.kind == tJump {
			to, ok := start[tg.chain]
			if !ok {
				return fmt.Errorf("jump to chain %s, which the table lacks", tg.chain)
			}
			v = int32(to)
		}
		ne.PutUint32(m[32:], uint32(v))
	case tError:
		putHeader(m, sizeError, nameError, 0)
		if len(tg.chain) > 29 {
			return fmt.Errorf("chain name %q is too long", tg.chain)
		}
		copy(m[32:62], tg.chain)
	case tReject:
		putHeader(m, sizeReject, nameReject, 0)
		ne.PutUint32(m[32:], tg.with)
	case tRedirect:
		if r.proto == 0 {
			return fmt.Errorf("REDIRECT needs a protocol")
		}
		if f == v4 {
			putHeader(m, sizeRedirect4, nameRedirect, 0)
			ne.PutUint32(m[32:], 1) // rangesize
			ne.PutUint32(m[36:], nfNATRangeProtoSpecified)
			binary.BigEndian.PutUint16(m[48:], tg.port)
			binary.BigEndian.PutUint16(m[50:], tg.port)
		} else {
			putHeader(m, sizeRedirect6, nameRedirect, 0)
			ne.PutUint32(m[32:], nfNATRangeProtoSpecified)
			binary.BigEndian.PutUint16(m[68:], tg.port)
			binary.BigEndian.PutUint16(m[70:], tg.port)
		}
	default:
		return fmt.Errorf("unknown target %d", tg.kind)
	}
	return nil
}
