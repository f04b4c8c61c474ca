package xt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Decoding reads a table back: a replace blob hybox made (tests, the
// golden files) or the entries the kernel or gVisor return for
// IPT_SO_GET_ENTRIES (to check what is in force). It accepts only what
// encode writes: the matches, targets and header fields hybox uses.

var errMalformed = errors.New("xt: malformed table")

func malformed(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errMalformed, fmt.Sprintf(format, a...))
}

// decodeReplace reads a replace blob of family f.
//
// # Errors
// errMalformed (wrapped) for anything encode would not have written.
func decodeReplace(b []byte, f family) (*table, error) {
	if len(b) < sizeReplace {
		return nil, malformed("%d bytes, shorter than the replace header", len(b))
	}
	name := cString(b[0:32])
	hooks := ne.Uint32(b[32:])
	num := ne.Uint32(b[36:])
	size := ne.Uint32(b[40:])
	if uint64(size) != uint64(len(b)-sizeReplace) {
		return nil, malformed("size %d, but %d bytes of entries", size, len(b)-sizeReplace)
	}
	var entry, under [numHooks]uint32
	for h := range numHooks {
		entry[h] = ne.Uint32(b[44+4*h:])
		under[h] = ne.Uint32(b[64+4*h:])
	}
	return decodeEntries(b[sizeReplace:], name, f, hooks, num, entry, under)
}

// hookNames names the builtin chains.
var hookNames = [numHooks]string{"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}

// decodeEntries reads the entries e of table name.
func decodeEntries(e []byte, name string, f family, hooks, num uint32, hookEntry, underflow [numHooks]uint32) (*table, error) {
	switch {
	case name == "filter" && hooks == filterHooks, name == "nat" && hooks == natHooks:
	default:
		return nil, malformed("table %q with hooks %#x", name, hooks)
	}
	lay := f.layout()
	type entry struct {
		off  int
		r    rule
		jump int // verdict of a jump, -1 if none
	}
	var entries []entry
	for off := 0; off < len(e); {
		if len(e)-off < lay.size || off%8 != 0 {
			return nil, malformed("entry at %d: truncated", off)
		}
		x := e[off:]
		next := int(ne.Uint16(x[lay.nextOffset:]))
		toff := int(ne.Uint16(x[lay.targetOffset:]))
		if next > len(x) || toff < lay.size || toff+sizeXTHeader > next || next%8 != 0 {
			return nil, malformed("entry at %d: target at %d, next at %d", off, toff, next)
		}
		r, jump, err := decodeRule(x[:next], toff, f)
		if err != nil {
			return nil, fmt.Errorf("entry at %d: %w", off, err)
		}
		entries = append(entries, entry{off: off, r: r, jump: jump})
		off += next
	}
	if uint32(len(entries)) != num {
		return nil, malformed("%d entries, but the header says %d", len(entries), num)
	}
	if len(entries) == 0 {
		return nil, malformed("no entries")
	}
	if last := entries[len(entries)-1].r.target; last.kind != tError || last.chain != nameError {
		return nil, malformed("the table does not end with an ERROR entry")
	}
	// Which offsets open which chains.
	index := map[int]int{}
	for i, en := range entries {
		index[en.off] = i
	}
	hookAt := map[int]int{}
	for h := range numHooks {
		if hooks&(1<<h) == 0 {
			continue
		}
		i, ok := index[int(hookEntry[h])]
		if !ok {
			return nil, malformed("hook %s enters at %d, which is no entry", hookNames[h], hookEntry[h])
		}
		if _, twice := hookAt[i]; twice {
			return nil, malformed("two hooks enter at %d", hookEntry[h])
		}
		hookAt[i] = h
	}
	chainAt := map[int]string{} // offset of a user chain's first rule → name
	for i, en := range entries[:len(entries)-1] {
		if en.r.target.kind == tError {
			chainAt[entries[i+1].off] = en.r.target.chain
		}
	}
	t := &table{name: name, family: f, hooks: hooks}
	var cur *chain
	for i := 0; i < len(entries)-1; i++ {
		en := entries[i]
		if h, ok := hookAt[i]; ok {
			if cur != nil {
				return nil, malformed("chain %s runs into hook %s", cur.name, hookNames[h])
			}
			t.chains = append(t.chains, chain{name: hookNames[h], hook: h})
			cur = &t.chains[len(t.chains)-1]
		}
		r := en.r
		switch {
		case r.target.kind == tError:
			if cur != nil {
				return nil, malformed("chain %s runs into chain %s", cur.name, r.target.chain)
			}
			if r.target.chain == nameError || slices.ContainsFunc(t.chains, func(c chain) bool { return c.name == r.target.chain }) {
				return nil, malformed("chain header %q", r.target.chain)
			}
			t.chains = append(t.chains, chain{name: r.target.chain, hook: -1})
			cur = &t.chains[len(t.chains)-1]
			continue
		case cur == nil:
			return nil, malformed("entry at %d belongs to no chain", en.off)
		}
		if en.jump >= 0 {
			to, ok := chainAt[en.jump]
			if !ok {
				return nil, malformed("jump to %d, which opens no chain", en.jump)
			}
			r.target = target{kind: tJump, chain: to}
		}
		if cur.hook >= 0 && uint32(en.off) == underflow[cur.hook] {
			if !r.unconditional() || (r.target.kind != tAccept && r.target.kind != tDrop) {
				return nil, malformed("the policy of %s is no unconditional ACCEPT or DROP", cur.name)
			}
			cur.policy = r.target.kind
			cur = nil
			continue
		}
		if cur.hook < 0 && r.unconditional() && r.target.kind == tReturn &&
			(entries[i+1].r.target.kind == tError || isHook(hookAt, i+1)) {
			cur = nil // the chain's closing RETURN
			continue
		}
		cur.rules = append(cur.rules, r)
	}
	if cur != nil {
		return nil, malformed("chain %s has no end", cur.name)
	}
	for h := range numHooks {
		if hooks&(1<<h) != 0 && !slices.ContainsFunc(t.chains, func(c chain) bool { return c.hook == h }) {
			return nil, malformed("no chain for hook %s", hookNames[h])
		}
	}
	for _, c := range t.chains {
		for _, r := range c.rules {
			if r.target.kind == tJump && !slices.ContainsFunc(t.chains, func(c chain) bool { return c.name == r.target.chain && c.hook < 0 }) {
				return nil, malformed("jump to %s", r.target.chain)
			}
		}
	}
	return t, nil
}

func isHook(hookAt map[int]int, i int) bool {
	_, ok := hookAt[i]
	return ok
}

// unconditional reports a rule that matches every packet.
func (r *rule) unconditional() bool {
	return !r.src.IsValid() && !r.dst.IsValid() && r.out == "" && r.proto == 0 && len(r.matches) == 0
}

// decodeRule reads one entry x (exactly next_offset long) whose target is
// at toff. jump is the verdict of a jump, -1 for other targets.
func decodeRule(x []byte, toff int, f family) (r rule, jump int, err error) {
	lay := f.layout()
	jump = -1
	for _, p := range []struct {
		into       *netip.Prefix
		addr, mask int
	}{{&r.src, lay.src, lay.smsk}, {&r.dst, lay.dst, lay.dmsk}} {
		mask := x[p.mask : p.mask+lay.addrLen]
		bits := maskBits(mask)
		if bits < 0 {
			return r, 0, malformed("a mask that is no prefix")
		}
		a := addrFrom(x[p.addr : p.addr+lay.addrLen])
		if bits == 0 {
			if !a.IsUnspecified() {
				return r, 0, malformed("an address without a mask")
			}
			continue
		}
		pr := netip.PrefixFrom(a, bits)
		if pr.Masked() != pr {
			return r, 0, malformed("address %v has bits outside its mask", pr)
		}
		*p.into = pr
	}
	if !allZero(x[lay.iniface:lay.iniface+16]) || !allZero(x[lay.inifaceMask:lay.inifaceMask+16]) {
		return r, 0, malformed("an input interface")
	}
	out := cString(x[lay.outiface : lay.outiface+16])
	omask := x[lay.outifaceMask : lay.outifaceMask+16]
	for i, m := range omask {
		want := byte(0)
		if out != "" && i <= len(out) {
			want = 0xff
		}
		if m != want {
			return r, 0, malformed("output interface mask")
		}
	}
	r.out = out
	proto := ne.Uint16(x[lay.proto:])
	if proto > 0xff {
		return r, 0, malformed("protocol %d", proto)
	}
	r.proto = uint8(proto)
	wantFlags := byte(0)
	if r.proto != 0 {
		wantFlags = lay.protoFlag
	}
	if x[lay.flags] != wantFlags || x[lay.invflags] != 0 {
		return r, 0, malformed("flags %#x, inverse flags %#x", x[lay.flags], x[lay.invflags])
	}
	for m := x[lay.size:toff]; len(m) > 0; {
		if len(m) < sizeXTHeader {
			return r, 0, malformed("truncated match")
		}
		size := int(ne.Uint16(m))
		name, rev := cString(m[2:31]), m[31]
		if size < sizeXTHeader || size > len(m) || size%8 != 0 {
			return r, 0, malformed("match %q of %d bytes", name, size)
		}
		d := m[sizeXTHeader:size]
		var mt match
		switch {
		case name == nameTCP && rev == 0 && size == sizeTCPMatch:
			if r.proto != 6 || d[8] != 0 || d[11] != 0 {
				return r, 0, malformed("tcp match")
			}
			mt = match{kind: mTCP, sport: [2]uint16{ne.Uint16(d[0:]), ne.Uint16(d[2:])},
				dport: [2]uint16{ne.Uint16(d[4:]), ne.Uint16(d[6:])}, flagMask: d[9], flagCmp: d[10]}
		case name == nameUDP && rev == 0 && size == sizeUDPMatch:
			if r.proto != 17 || d[8] != 0 {
				return r, 0, malformed("udp match")
			}
			mt = match{kind: mUDP, sport: [2]uint16{ne.Uint16(d[0:]), ne.Uint16(d[2:])},
				dport: [2]uint16{ne.Uint16(d[4:]), ne.Uint16(d[6:])}}
		case name == nameMark && (rev == markRevision || rev == 0) && size == sizeMarkMatch:
			// gVisor's netstack gives back the revision-1 match it took
			// as revision 0; hybox writes revision 1 only.
			if ne.Uint32(d[4:]) != 0xffffffff || d[8] != 0 {
				return r, 0, malformed("mark match")
			}
			mt = match{kind: mMark, mark: ne.Uint32(d[0:])}
		default:
			return r, 0, malformed("match %q revision %d of %d bytes", name, rev, size)
		}
		r.matches = append(r.matches, mt)
		m = m[size:]
	}
	t := x[toff:]
	size := int(ne.Uint16(t))
	name, rev := cString(t[2:31]), t[31]
	if size != len(t) || rev != 0 {
		return r, 0, malformed("target %q revision %d of %d bytes in %d", name, rev, size, len(t))
	}
	d := t[sizeXTHeader:]
	switch {
	case name == "" && size == sizeStandard:
		v := int32(ne.Uint32(d))
		switch {
		case v == verdictAccept:
			r.target.kind = tAccept
		case v == verdictDrop:
			r.target.kind = tDrop
		case v == verdictReturn:
			r.target.kind = tReturn
		case v >= 0:
			r.target.kind, jump = tJump, int(v)
		default:
			return r, 0, malformed("verdict %d", v)
		}
	case name == nameError && size == sizeError:
		r.target = target{kind: tError, chain: cString(d[:30])}
		if r.target.chain == "" || !r.unconditional() {
			return r, 0, malformed("ERROR entry")
		}
	case name == nameReject && size == sizeReject:
		r.target = target{kind: tReject, with: ne.Uint32(d)}
		ok := r.target.with == reject4PortUnreachable || r.target.with == reject4TCPReset
		if f == v6 {
			ok = r.target.with == reject6PortUnreachable || r.target.with == reject6TCPReset
		}
		if !ok || r.target.isReset(f) && r.proto != 6 {
			return r, 0, malformed("REJECT with %d", r.target.with)
		}
	case name == nameRedirect && f == v4 && size == sizeRedirect4:
		lo, hi := binary.BigEndian.Uint16(d[16:]), binary.BigEndian.Uint16(d[18:])
		if ne.Uint32(d) != 1 || ne.Uint32(d[4:]) != nfNATRangeProtoSpecified || !allZero(d[8:16]) || lo != hi || r.proto == 0 {
			return r, 0, malformed("REDIRECT")
		}
		r.target = target{kind: tRedirect, port: lo}
	case name == nameRedirect && f == v6 && size == sizeRedirect6:
		lo, hi := binary.BigEndian.Uint16(d[36:]), binary.BigEndian.Uint16(d[38:])
		if ne.Uint32(d) != nfNATRangeProtoSpecified || !allZero(d[4:36]) || lo != hi || r.proto == 0 {
			return r, 0, malformed("REDIRECT")
		}
		r.target = target{kind: tRedirect, port: lo}
	default:
		return r, 0, malformed("target %q of %d bytes", name, size)
	}
	return r, jump, nil
}

func (t target) isReset(f family) bool {
	if f == v6 {
		return t.with == reject6TCPReset
	}
	return t.with == reject4TCPReset
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// cString is the NUL-terminated string at the start of b.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// String renders t as iptables-save does (without counters and
// comments): what the golden files hold, and what iptables-legacy-save
// prints for the same table.
func (t *table) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%s\n", t.name)
	for _, c := range t.chains {
		if c.hook >= 0 {
			pol := "ACCEPT"
			if c.policy == tDrop {
				pol = "DROP"
			}
			fmt.Fprintf(&b, ":%s %s\n", c.name, pol)
		}
	}
	for _, c := range t.chains {
		if c.hook < 0 {
			fmt.Fprintf(&b, ":%s -\n", c.name)
		}
	}
	for _, c := range t.chains {
		for _, r := range c.rules {
			fmt.Fprintf(&b, "-A %s%s\n", c.name, r.render(t.family))
		}
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

var protoNames = map[uint8]string{1: "icmp", 6: "tcp", 17: "udp", 58: "ipv6-icmp"}

// render is r's arguments as iptables-save writes them.
func (r *rule) render(f family) string {
	var b strings.Builder
	if r.src.IsValid() {
		fmt.Fprintf(&b, " -s %v", r.src)
	}
	if r.dst.IsValid() {
		fmt.Fprintf(&b, " -d %v", r.dst)
	}
	if r.out != "" {
		fmt.Fprintf(&b, " -o %s", r.out)
	}
	if r.proto != 0 {
		p, ok := protoNames[r.proto]
		if !ok {
			p = strconv.Itoa(int(r.proto))
		}
		fmt.Fprintf(&b, " -p %s", p)
	}
	for _, m := range r.matches {
		switch m.kind {
		case mTCP, mUDP:
			name := nameTCP
			if m.kind == mUDP {
				name = nameUDP
			}
			fmt.Fprintf(&b, " -m %s", name)
			for _, p := range []struct {
				flag string
				r    [2]uint16
			}{{"--sport", m.sport}, {"--dport", m.dport}} {
				switch {
				case p.r == anyPort:
				case p.r[0] == p.r[1]:
					fmt.Fprintf(&b, " %s %d", p.flag, p.r[0])
				default:
					fmt.Fprintf(&b, " %s %d:%d", p.flag, p.r[0], p.r[1])
				}
			}
			if m.kind == mTCP && m.flagMask != 0 {
				fmt.Fprintf(&b, " --tcp-flags %s %s", tcpFlags(m.flagMask), tcpFlags(m.flagCmp))
			}
		case mMark:
			fmt.Fprintf(&b, " -m mark --mark %#x", m.mark)
		}
	}
	switch t := r.target; t.kind {
	case tAccept:
		b.WriteString(" -j ACCEPT")
	case tDrop:
		b.WriteString(" -j DROP")
	case tReturn:
		b.WriteString(" -j RETURN")
	case tJump:
		fmt.Fprintf(&b, " -j %s", t.chain)
	case tReject:
		with := "icmp-port-unreachable"
		switch {
		case t.isReset(f):
			with = "tcp-reset"
		case f == v6:
			with = "icmp6-port-unreachable"
		}
		fmt.Fprintf(&b, " -j REJECT --reject-with %s", with)
	case tRedirect:
		fmt.Fprintf(&b, " -j REDIRECT --to-ports %d", t.port)
	}
	return b.String()
}

// tcpFlags names flags as iptables does.
func tcpFlags(f uint8) string {
	if f == 0 {
		return "NONE"
	}
	if f == 0x3f {
		return "ALL"
	}
	var names []string
	for _, n := range []struct {
		bit  uint8
		name string
	}{{tcpFIN, "FIN"}, {tcpSYN, "SYN"}, {tcpRST, "RST"}, {0x08, "PSH"}, {tcpACK, "ACK"}, {0x20, "URG"}} {
		if f&n.bit != 0 {
			names = append(names, n.name)
		}
	}
	return strings.Join(names, ",")
}
