package xt

import (
	"encoding/binary"
	"net/netip"
	"unsafe"
)

// The legacy x_tables ABI (linux/netfilter_ipv4/ip_tables.h,
// linux/netfilter_ipv6/ip6_tables.h, linux/netfilter/x_tables.h and the
// headers of each match and target), as laid out on 64-bit Linux. Every
// integer is in host byte order except addresses and the REDIRECT ports,
// which are in network byte order. Every entry, match and target is
// padded to a multiple of 8 bytes (XT_ALIGN).

// Socket options, at SOL_IP (IPv4) and SOL_IPV6 (IPv6).
const (
	soSetReplace = 64 // IPT_SO_SET_REPLACE, IP6T_SO_SET_REPLACE
	soGetInfo    = 64 // IPT_SO_GET_INFO, IP6T_SO_GET_INFO
	soGetEntries = 65 // IPT_SO_GET_ENTRIES, IP6T_SO_GET_ENTRIES
)

// Sizes of the structures.
const (
	sizeReplace   = 96  // struct ipt_replace, struct ip6t_replace
	sizeGetInfo   = 84  // struct ipt_getinfo
	sizeGetHead   = 40  // struct ipt_get_entries without its entries
	sizeEntry4    = 112 // struct ipt_entry
	sizeEntry6    = 168 // struct ip6t_entry
	sizeXTHeader  = 32  // struct xt_entry_match, struct xt_entry_target
	sizeStandard  = 40  // struct xt_standard_target
	sizeError     = 64  // struct xt_error_target
	sizeReject    = 40  // xt_entry_target + struct ipt_reject_info / ip6t_reject_info
	sizeRedirect4 = 56  // xt_entry_target + struct nf_nat_ipv4_multi_range_compat
	sizeRedirect6 = 72  // xt_entry_target + struct nf_nat_range
	sizeTCPMatch  = 48  // xt_entry_match + struct xt_tcp
	sizeUDPMatch  = 48  // xt_entry_match + struct xt_udp
	sizeMarkMatch = 48  // xt_entry_match + struct xt_mark_mtinfo1 (revision 1)
	sizeCounters  = 16  // struct xt_counters
)

// MaxBlob is the largest replace gVisor's netstack takes: setsockopt
// refuses a longer option. It counts the 96-byte header.
const MaxBlob = 32 << 10

// Netfilter hooks (enum nf_inet_hooks).
const (
	hookPreRouting  = 0
	hookLocalIn     = 1
	hookForward     = 2
	hookLocalOut    = 3
	hookPostRouting = 4
	numHooks        = 5
)

// Verdicts of the standard target: -NF_DROP-1, -NF_ACCEPT-1, XT_RETURN.
const (
	verdictDrop   int32 = -1
	verdictAccept int32 = -2
	verdictReturn int32 = -5
)

// Field offsets in ipt_entry and ip6t_entry.
type entryLayout struct {
	size                      int // the struct
	addrLen                   int // 4 or 16
	src, dst, smsk, dmsk      int
	iniface, outiface         int
	inifaceMask, outifaceMask int
	proto, flags, invflags    int
	targetOffset, nextOffset  int
	protoFlag                 byte
}

var layout4 = entryLayout{
	size: sizeEntry4, addrLen: 4,
	src: 0, dst: 4, smsk: 8, dmsk: 12,
	iniface: 16, outiface: 32, inifaceMask: 48, outifaceMask: 64,
	proto: 80, flags: 82, invflags: 83,
	targetOffset: 88, nextOffset: 90,
}

var layout6 = entryLayout{
	size: sizeEntry6, addrLen: 16,
	src: 0, dst: 16, smsk: 32, dmsk: 48,
	iniface: 64, outiface: 80, inifaceMask: 96, outifaceMask: 112,
	proto: 128, flags: 131, invflags: 132, // tos at 130
	targetOffset: 140, nextOffset: 142,
	protoFlag: 0x01, // IP6T_F_PROTO: the rule looks at the protocol
}

func (f family) layout() *entryLayout {
	if f == v6 {
		return &layout6
	}
	return &layout4
}

// Names and revisions of the extensions.
const (
	nameError    = "ERROR"
	nameReject   = "REJECT"
	nameRedirect = "REDIRECT"
	nameTCP      = "tcp"
	nameUDP      = "udp"
	nameMark     = "mark"
	markRevision = 1
)

// REJECT kinds (enum ipt_reject_with, enum ip6t_reject_with). gVisor's
// netstack sends no other kind.
const (
	reject4PortUnreachable uint32 = 3 // IPT_ICMP_PORT_UNREACHABLE
	reject4TCPReset        uint32 = 7 // IPT_TCP_RESET
	reject6PortUnreachable uint32 = 4 // IP6T_ICMP6_PORT_UNREACH
	reject6TCPReset        uint32 = 6 // IP6T_TCP_RESET
)

// nfNATRangeProtoSpecified is NF_NAT_RANGE_PROTO_SPECIFIED.
const nfNATRangeProtoSpecified = 2

// TCP flags of struct xt_tcp's flg_mask and flg_cmp.
const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpACK = 0x10
)

var ne = binary.NativeEndian

// putHeader writes an xt_entry_match or xt_entry_target header: its
// whole size, its name and revision.
func putHeader(b []byte, size int, name string, revision uint8) {
	ne.PutUint16(b[0:], uint16(size))
	copy(b[2:31], name)
	b[31] = revision
}

// putMask writes the mask of a prefix of bits bits into b.
func putMask(b []byte, bits int) {
	for i := range b {
		switch {
		case bits >= 8:
			b[i] = 0xff
			bits -= 8
		case bits > 0:
			b[i] = byte(0xff << (8 - bits))
			bits = 0
		default:
			b[i] = 0
		}
	}
}

// maskBits is the length of the prefix a mask b holds, -1 for a mask that
// is not a prefix.
func maskBits(b []byte) int {
	n := 0
	for i, x := range b {
		switch x {
		case 0xff:
			n += 8
			continue
		case 0:
		default:
			ones := 0
			for x&0x80 != 0 {
				ones++
				x <<= 1
			}
			if x != 0 {
				return -1
			}
			n += ones
		}
		for _, y := range b[i+1:] {
			if y != 0 {
				return -1
			}
		}
		return n
	}
	return n
}

// addrFrom reads an address of length n from b.
func addrFrom(b []byte) netip.Addr {
	if len(b) == 4 {
		return netip.AddrFrom4([4]byte(b))
	}
	return netip.AddrFrom16([16]byte(b))
}

// The layouts above are those of 64-bit Linux (the counters pointer of
// the replace header is 8 bytes): this fails to compile elsewhere.
const _ uint = uint(unsafe.Sizeof(uintptr(0))) - 8
