package nft

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Chains of the table.
const (
	chainOutput   = "output"   // base: filter hook output priority -150
	chainOut4     = "out4"     // IPv4 rules, learned4, default
	chainOut6     = "out6"     // IPv6 rules, learned6, default
	chainDeny     = "deny"     // reject: tcp reset, else icmpx admin-prohibited
	chainRedirect = "redirect" // base: nat hook output priority -100
	chainGuard    = "guard"    // base: filter hook output priority -160
	chainTrack    = "track"    // base: filter hook output priority -150, unrestricted only
)

// Priorities: the filter runs before NAT rewrites the destination.
var (
	guardPriority  = nftables.ChainPriorityRef(-160)
	filterPriority = nftables.ChainPriorityRef(-150)
	natPriority    = nftables.ChainPriorityNATDest // -100
)

// loIndex is the interface index of loopback in every network namespace.
const loIndex = 1

// ICMPv6 neighbour discovery types (RFC 4861).
const (
	ndRouterSolicit   = 133
	ndNeighborSolicit = 135
	ndNeighborAdvert  = 136
)

// Offsets in the network header.
const (
	hopLimitOffset = 7 // IPv6
	daddr4Offset   = 16
	daddr6Offset   = 24
)

// build queues the batch that replaces the table: create it if missing
// (so that the deletion cannot fail), delete it, create it again with the
// sets, chains and rules. The caller flushes.
func build(c *nftables.Conn, r Rules, learned, blocked [2][]nftables.SetElement) error {
	table := &nftables.Table{Family: nftables.TableFamilyINet, Name: TableName}
	c.AddTable(table)
	c.DelTable(table)
	c.AddTable(table)

	// Sets get IDs from this batch's counter: left at zero, the library
	// would draw them from an unsynchronised global, a data race between
	// tables applied concurrently.
	var ids setIDs
	set4 := learnedSet(table, Learned4, nftables.TypeIPAddr)
	set6 := learnedSet(table, Learned6, nftables.TypeIP6Addr)
	blk4 := learnedSet(table, Blocked4, nftables.TypeIPAddr)
	blk6 := learnedSet(table, Blocked6, nftables.TypeIP6Addr)
	set4.ID, set6.ID, blk4.ID, blk6.ID = ids.next(), ids.next(), ids.next(), ids.next()
	for _, s := range []struct {
		set   *nftables.Set
		elems []nftables.SetElement
	}{{set4, learned[0]}, {set6, learned[1]}, {blk4, blocked[0]}, {blk6, blocked[1]}} {
		if err := c.AddSet(s.set, nil); err != nil {
			return fmt.Errorf("set %s: %w", s.set.Name, err)
		}
		if err := addElements(c, s.set, s.elems); err != nil {
			return fmt.Errorf("set %s: %w", s.set.Name, err)
		}
	}

	if len(r.GuardPorts) > 0 {
		if err := buildGuard(c, table, r, &ids); err != nil {
			return err
		}
	}
	if r.Enforce {
		if err := buildFilter(c, table, r, [2]*nftables.Set{set4, set6}, [2]*nftables.Set{blk4, blk6}, &ids); err != nil {
			return err
		}
	} else {
		buildTrack(c, table)
	}
	if r.RedirectPort != 0 {
		buildRedirect(c, table, r.RedirectPort, r.BypassMark)
	}
	return nil
}

// buildTrack queues a chain that filters nothing but uses connection
// tracking, which the kernel runs in a namespace only while its ruleset
// needs it:
//
//	chain track { type filter hook output priority -150; ct state established,related accept }
//
// Without it, an unrestricted namespace tracks nothing, and a policy
// applied later (a pool member's at claim, a sandbox's first) would meet
// its open connections mid-stream: the first packet the namespace sends
// on one, the answer to a request that came before, is new to the filter
// and rejected.
func buildTrack(c *nftables.Conn, table *nftables.Table) {
	track := c.AddChain(&nftables.Chain{
		Name:     chainTrack,
		Table:    table,
		Type:     nftables.ChainTypeFilter,
		Hooknum:  nftables.ChainHookOutput,
		Priority: filterPriority,
	})
	c.AddRule(&nftables.Rule{Table: table, Chain: track, Exprs: ctEstablished(&expr.Verdict{Kind: expr.VerdictAccept})})
}

// ctEstablished matches packets of established or related connections.
func ctEstablished(v *expr.Verdict) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{
			SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED),
			Xor:  make([]byte, 4),
		},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
		v,
	}
}

// anonSet is the name template of anonymous sets; the kernel fills in
// the number. (The library sets it only when it allocates the ID.)
const anonSet = "__set%d"

// setIDs numbers the sets created in one batch.
type setIDs uint32

func (n *setIDs) next() uint32 {
	*n++
	return uint32(*n)
}

// learnedSet describes a learned-address set of table.
func learnedSet(table *nftables.Table, name string, key nftables.SetDatatype) *nftables.Set {
	return &nftables.Set{Table: table, Name: name, KeyType: key, HasTimeout: true}
}

// buildFilter queues the filter chains:
//
//	chain output { type filter hook output priority -150
//	  meta mark <BypassMark> accept      (when BypassMark is set)
//	  oif lo accept
//	  ct state established,related accept
//	  meta l4proto { tcp, udp } th dport { 53, 853 } goto deny
//	  meta nfproto ipv4 goto out4
//	  meta nfproto ipv6 goto out6
//	  <default> }
//	chain out4 { ip daddr <prefix> accept|goto deny ...; ip daddr @blocked4 goto deny;
//	             ip daddr @learned4 accept; <default> }
//	chain out6 { ip6 hoplimit 255 icmpv6 type { nd-router-solicit, nd-neighbor-solicit, nd-neighbor-advert } accept
//	             (then as out4, for IPv6) }
//	chain deny { meta l4proto tcp reject with tcp reset; reject with icmpx admin-prohibited }
func buildFilter(c *nftables.Conn, table *nftables.Table, r Rules, learned, blocked [2]*nftables.Set, ids *setIDs) error {
	deny := c.AddChain(&nftables.Chain{Name: chainDeny, Table: table})
	out4 := c.AddChain(&nftables.Chain{Name: chainOut4, Table: table})
	out6 := c.AddChain(&nftables.Chain{Name: chainOut6, Table: table})
	output := c.AddChain(&nftables.Chain{
		Name:     chainOutput,
		Table:    table,
		Type:     nftables.ChainTypeFilter,
		Hooknum:  nftables.ChainHookOutput,
		Priority: filterPriority,
	})

	c.AddRule(&nftables.Rule{Table: table, Chain: deny, Exprs: []expr.Any{
		loadMeta(expr.MetaKeyL4PROTO), cmpEq([]byte{unix.IPPROTO_TCP}),
		&expr.Reject{Type: unix.NFT_REJECT_TCP_RST},
	}})
	c.AddRule(&nftables.Rule{Table: table, Chain: deny, Exprs: []expr.Any{
		&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED},
	}})

	dflt := gotoChain(chainDeny)
	if r.DefaultAllow {
		dflt = &expr.Verdict{Kind: expr.VerdictAccept}
	}
	accept := &expr.Verdict{Kind: expr.VerdictAccept}

	// Anonymous constant sets for the DNS rule.
	protos := &nftables.Set{ID: ids.next(), Name: anonSet, Table: table, Anonymous: true, Constant: true, KeyType: nftables.TypeInetProto}
	if err := c.AddSet(protos, []nftables.SetElement{
		{Key: []byte{unix.IPPROTO_TCP}}, {Key: []byte{unix.IPPROTO_UDP}},
	}); err != nil {
		return fmt.Errorf("dns protocol set: %w", err)
	}
	ports := &nftables.Set{ID: ids.next(), Name: anonSet, Table: table, Anonymous: true, Constant: true, KeyType: nftables.TypeInetService}
	if err := c.AddSet(ports, []nftables.SetElement{
		{Key: binaryutil.BigEndian.PutUint16(53)}, {Key: binaryutil.BigEndian.PutUint16(853)},
	}); err != nil {
		return fmt.Errorf("dns port set: %w", err)
	}

	var first [][]expr.Any
	if r.BypassMark != 0 {
		first = append(first, markIs(r.BypassMark, accept))
	}
	for _, exprs := range append(first, [][]expr.Any{
		{loadMeta(expr.MetaKeyOIF), cmpEq(binaryutil.NativeEndian.PutUint32(loIndex)), accept},
		ctEstablished(accept),
		{
			loadMeta(expr.MetaKeyL4PROTO),
			&expr.Lookup{SourceRegister: 1, SetName: protos.Name, SetID: protos.ID},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Lookup{SourceRegister: 1, SetName: ports.Name, SetID: ports.ID},
			gotoChain(chainDeny),
		},
		{loadMeta(expr.MetaKeyNFPROTO), cmpEq([]byte{unix.NFPROTO_IPV4}), gotoChain(chainOut4)},
		{loadMeta(expr.MetaKeyNFPROTO), cmpEq([]byte{unix.NFPROTO_IPV6}), gotoChain(chainOut6)},
		{dflt},
	}...) {
		c.AddRule(&nftables.Rule{Table: table, Chain: output, Exprs: exprs})
	}

	// Neighbour discovery is IPv6's ARP: without it no IPv6 destination,
	// allowed or not, is reachable on the link. It carries no payload.
	nd := &nftables.Set{ID: ids.next(), Name: anonSet, Table: table, Anonymous: true, Constant: true, KeyType: nftables.TypeICMP6Type}
	if err := c.AddSet(nd, []nftables.SetElement{
		{Key: []byte{ndRouterSolicit}}, {Key: []byte{ndNeighborSolicit}}, {Key: []byte{ndNeighborAdvert}},
	}); err != nil {
		return fmt.Errorf("neighbour discovery set: %w", err)
	}
	c.AddRule(&nftables.Rule{Table: table, Chain: out6, Exprs: []expr.Any{
		// Hop limit 255: receivers drop neighbour discovery with any other
		// value (RFC 4861), so these packets cannot carry data off the link.
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: hopLimitOffset, Len: 1},
		cmpEq([]byte{255}),
		loadMeta(expr.MetaKeyL4PROTO), cmpEq([]byte{unix.IPPROTO_ICMPV6}),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		&expr.Lookup{SourceRegister: 1, SetName: nd.Name, SetID: nd.ID},
		accept,
	}})

	for _, ir := range r.IPRules {
		p := normalize(ir.Prefix)
		verdict := gotoChain(chainDeny)
		if ir.Allow {
			verdict = accept
		}
		chain := out6
		if p.Addr().Is4() {
			chain = out4
		}
		c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: append(daddrMatch(p), verdict)})
	}
	for _, l := range []struct {
		chain            *nftables.Chain
		learned, blocked *nftables.Set
		offset           uint32
		size             uint32
	}{{out4, learned[0], blocked[0], daddr4Offset, 4}, {out6, learned[1], blocked[1], daddr6Offset, 16}} {
		for _, sv := range []struct {
			set     *nftables.Set
			verdict expr.Any
		}{{l.blocked, gotoChain(chainDeny)}, {l.learned, accept}} {
			c.AddRule(&nftables.Rule{Table: table, Chain: l.chain, Exprs: []expr.Any{
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: l.offset, Len: l.size},
				&expr.Lookup{SourceRegister: 1, SetName: sv.set.Name, SetID: sv.set.ID},
				sv.verdict,
			}})
		}
		c.AddRule(&nftables.Rule{Table: table, Chain: l.chain, Exprs: []expr.Any{dflt}})
	}
	return nil
}

// buildGuard queues:
//
//	chain guard { type filter hook output priority -160
//	  meta mark <BypassMark> return
//	  meta l4proto tcp th dport { <GuardPorts> } reject with tcp reset }
//
// Only locally generated packets pass the output hook: the replies of a
// guarded port's server go from that port, not to it, so connections from
// outside the namespace are untouched.
func buildGuard(c *nftables.Conn, table *nftables.Table, r Rules, ids *setIDs) error {
	chain := c.AddChain(&nftables.Chain{
		Name:     chainGuard,
		Table:    table,
		Type:     nftables.ChainTypeFilter,
		Hooknum:  nftables.ChainHookOutput,
		Priority: guardPriority,
	})
	if r.BypassMark != 0 {
		c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: markIs(r.BypassMark, &expr.Verdict{Kind: expr.VerdictReturn})})
	}
	ports := &nftables.Set{ID: ids.next(), Name: anonSet, Table: table, Anonymous: true, Constant: true, KeyType: nftables.TypeInetService}
	var elems []nftables.SetElement
	for _, p := range r.GuardPorts {
		elems = append(elems, nftables.SetElement{Key: binaryutil.BigEndian.PutUint16(p)})
	}
	if err := c.AddSet(ports, elems); err != nil {
		return fmt.Errorf("guard port set: %w", err)
	}
	c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{
		loadMeta(expr.MetaKeyL4PROTO), cmpEq([]byte{unix.IPPROTO_TCP}),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Lookup{SourceRegister: 1, SetName: ports.Name, SetID: ports.ID},
		&expr.Reject{Type: unix.NFT_REJECT_TCP_RST},
	}})
	return nil
}

// markIs matches packets whose mark is mark, then verdict.
func markIs(mark uint32, verdict expr.Any) []expr.Any {
	return []expr.Any{loadMeta(expr.MetaKeyMARK), cmpEq(binaryutil.NativeEndian.PutUint32(mark)), verdict}
}

// buildRedirect queues:
//
//	chain redirect { type nat hook output priority -100
//	  meta mark <bypass> return      (when bypass is set)
//	  oif lo return
//	  meta l4proto tcp redirect to :port }
func buildRedirect(c *nftables.Conn, table *nftables.Table, port uint16, bypass uint32) {
	chain := c.AddChain(&nftables.Chain{
		Name:     chainRedirect,
		Table:    table,
		Type:     nftables.ChainTypeNAT,
		Hooknum:  nftables.ChainHookOutput,
		Priority: natPriority,
	})
	if bypass != 0 {
		c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: markIs(bypass, &expr.Verdict{Kind: expr.VerdictReturn})})
	}
	c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{
		loadMeta(expr.MetaKeyOIF), cmpEq(binaryutil.NativeEndian.PutUint32(loIndex)),
		&expr.Verdict{Kind: expr.VerdictReturn},
	}})
	c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{
		loadMeta(expr.MetaKeyL4PROTO), cmpEq([]byte{unix.IPPROTO_TCP}),
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.Redir{RegisterProtoMin: 1, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED},
	}})
}

// normalize masks p and turns IPv4-mapped prefixes of /96 or longer into
// IPv4 prefixes.
func normalize(p netip.Prefix) netip.Prefix {
	p = p.Masked()
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p
}

// daddrMatch matches the destination address against a masked prefix,
// loading only the bytes the prefix covers. A /0 matches everything of
// its family and needs no expression.
func daddrMatch(p netip.Prefix) []expr.Any {
	bits := p.Bits()
	if bits == 0 {
		return nil
	}
	offset := uint32(daddr6Offset)
	if p.Addr().Is4() {
		offset = daddr4Offset
	}
	n := (bits + 7) / 8
	exprs := []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: uint32(n)},
	}
	if rem := bits % 8; rem != 0 {
		mask := make([]byte, n)
		for i := range mask {
			mask[i] = 0xff
		}
		mask[n-1] = byte(0xff << (8 - rem))
		exprs = append(exprs, &expr.Bitwise{
			SourceRegister: 1, DestRegister: 1, Len: uint32(n), Mask: mask, Xor: make([]byte, n),
		})
	}
	return append(exprs, cmpEq(p.Addr().AsSlice()[:n]))
}

func loadMeta(key expr.MetaKey) *expr.Meta { return &expr.Meta{Key: key, Register: 1} }

func cmpEq(data []byte) *expr.Cmp { return &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: data} }

func gotoChain(name string) *expr.Verdict { return &expr.Verdict{Kind: expr.VerdictGoto, Chain: name} }
