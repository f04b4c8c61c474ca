package tproxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
)

const (
	recordTypeHandshake    = 0x16
	handshakeTypeClientHi  = 0x01
	recordHeaderLen        = 5
	maxRecordPayload       = 16384 + 2048 // TLSCiphertext limit, generous for TLS 1.2
	extensionServerName    = 0x0000
	serverNameTypeHostName = 0x00
)

// Errors of the peeking functions.
var (
	// errTooLarge: the ClientHello or the HTTP request head does not fit in
	// the reader's buffer.
	errTooLarge = errors.New("does not fit in the peek buffer")
	// errMalformed: the bytes start like a TLS handshake but are not a
	// well-formed ClientHello.
	errMalformed = errors.New("malformed TLS ClientHello")
)

// PeekClientHello looks at the start of r, without consuming anything, for
// a TLS ClientHello and returns its server name (SNI). isTLS reports whether
// the bytes begin with a TLS handshake record (content type 0x16, major
// version 3); the rest is parsed only then. The ClientHello may be split
// across reads and across several TLS records; r's buffer size caps how much
// is peeked. The server name is lower-cased, without a trailing dot, and
// empty when the client sent none.
//
// # Errors
//
// A read error from r (including a deadline expiring), a ClientHello larger
// than r's buffer, or a malformed one; isTLS is still reported. Whatever
// happens, r's unread bytes are unchanged.
func PeekClientHello(r *bufio.Reader) (sni string, isTLS bool, err error) {
	hdr, err := r.Peek(3)
	if len(hdr) > 0 && hdr[0] != recordTypeHandshake {
		return "", false, nil
	}
	if len(hdr) > 1 && hdr[1] != 3 {
		return "", false, nil
	}
	if err != nil {
		return "", len(hdr) > 0, fmt.Errorf("peek TLS record header: %w", err)
	}

	// Gather the handshake message from as many records as it spans.
	var msg []byte
	need := 4 // handshake header, then the whole message
	off := 0
	for len(msg) < need {
		rec, err := peekN(r, off+recordHeaderLen)
		if err != nil {
			return "", true, fmt.Errorf("peek TLS record: %w", err)
		}
		h := rec[off:]
		if h[0] != recordTypeHandshake || h[1] != 3 {
			return "", true, fmt.Errorf("%w: record of type %#x inside the ClientHello", errMalformed, h[0])
		}
		n := int(h[3])<<8 | int(h[4])
		if n == 0 || n > maxRecordPayload {
			return "", true, fmt.Errorf("%w: record length %d", errMalformed, n)
		}
		rec, err = peekN(r, off+recordHeaderLen+n)
		if err != nil {
			return "", true, fmt.Errorf("peek TLS record: %w", err)
		}
		msg = append(msg, rec[off+recordHeaderLen:]...)
		off += recordHeaderLen + n
		if len(msg) >= 4 && need == 4 {
			if msg[0] != handshakeTypeClientHi {
				return "", true, fmt.Errorf("%w: handshake type %d", errMalformed, msg[0])
			}
			need = 4 + (int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3]))
			if need > r.Size() {
				return "", true, fmt.Errorf("ClientHello of %d bytes: %w", need, errTooLarge)
			}
		}
	}
	sni, err = parseClientHello(msg[4:need])
	if err != nil {
		return "", true, err
	}
	return sni, true, nil
}

// peekN peeks n bytes, mapping a full buffer to errTooLarge.
func peekN(r *bufio.Reader, n int) ([]byte, error) {
	if n > r.Size() {
		return nil, errTooLarge
	}
	b, err := r.Peek(n)
	if errors.Is(err, bufio.ErrBufferFull) {
		return nil, errTooLarge
	}
	return b, err
}

// parseClientHello walks a ClientHello body (after the handshake header) to
// its server_name extension.
func parseClientHello(b []byte) (string, error) {
	s := byteString(b)
	if !s.skip(2+32) || // legacy_version, random
		!s.skipVec(1) || // legacy_session_id
		!s.skipVec(2) || // cipher_suites
		!s.skipVec(1) { // legacy_compression_methods
		return "", fmt.Errorf("%w: truncated", errMalformed)
	}
	if len(s) == 0 {
		return "", nil // no extensions
	}
	exts, ok := s.vec(2)
	if !ok {
		return "", fmt.Errorf("%w: truncated extensions", errMalformed)
	}
	for len(exts) > 0 {
		typ, ok1 := exts.u16()
		data, ok2 := exts.vec(2)
		if !ok1 || !ok2 {
			return "", fmt.Errorf("%w: truncated extension", errMalformed)
		}
		if typ != extensionServerName {
			continue
		}
		list, ok := data.vec(2)
		if !ok || len(data) != 0 {
			return "", fmt.Errorf("%w: bad server_name extension", errMalformed)
		}
		for len(list) > 0 {
			nt, ok1 := list.u8()
			name, ok2 := list.vec(2)
			if !ok1 || !ok2 {
				return "", fmt.Errorf("%w: bad server_name entry", errMalformed)
			}
			if nt != serverNameTypeHostName {
				continue
			}
			host := normalizeName(string(name))
			if !validDNSName(host) {
				return "", fmt.Errorf("%w: invalid server name %q", errMalformed, name)
			}
			return host, nil
		}
		return "", nil
	}
	return "", nil
}

// byteString is a cursor over TLS wire data.
type byteString []byte

func (s *byteString) skip(n int) bool {
	if len(*s) < n {
		return false
	}
	*s = (*s)[n:]
	return true
}

func (s *byteString) u8() (byte, bool) {
	if len(*s) < 1 {
		return 0, false
	}
	v := (*s)[0]
	*s = (*s)[1:]
	return v, true
}

func (s *byteString) u16() (int, bool) {
	if len(*s) < 2 {
		return 0, false
	}
	v := int((*s)[0])<<8 | int((*s)[1])
	*s = (*s)[2:]
	return v, true
}

// vec reads a vector with a big-endian length prefix of lenBytes (1 or 2).
func (s *byteString) vec(lenBytes int) (byteString, bool) {
	var n int
	var ok bool
	if lenBytes == 1 {
		var v byte
		v, ok = s.u8()
		n = int(v)
	} else {
		n, ok = s.u16()
	}
	if !ok || len(*s) < n {
		return nil, false
	}
	v := (*s)[:n]
	*s = (*s)[n:]
	return v, true
}

func (s *byteString) skipVec(lenBytes int) bool {
	_, ok := s.vec(lenBytes)
	return ok
}

// peekHTTPHost looks at the start of r, without consuming anything, for an
// HTTP/1.x request head and returns its host (from the Host header or an
// absolute request target), normalized and without a port. isHTTP reports
// whether the bytes so far form a plausible HTTP/1.x request line; reading
// stops as soon as they cannot.
func peekHTTPHost(r *bufio.Reader) (host string, isHTTP bool, err error) {
	for {
		b, _ := r.Peek(r.Buffered())
		switch requestLineState(b) {
		case lineInvalid:
			return "", false, nil
		case lineComplete:
			if end := bytes.Index(b, []byte("\r\n\r\n")); end >= 0 {
				return parseRequestHost(b[:end+4])
			}
		}
		if err != nil {
			return "", len(b) > 0, fmt.Errorf("peek HTTP request head: %w", err)
		}
		if len(b) >= r.Size() {
			return "", true, fmt.Errorf("HTTP request head: %w", errTooLarge)
		}
		// Wait for at least one more byte; on error, look once more at what
		// arrived before giving up.
		_, err = r.Peek(len(b) + 1)
	}
}

func parseRequestHost(head []byte) (string, bool, error) {
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err != nil {
		return "", true, fmt.Errorf("parse HTTP request head: %w", err)
	}
	host := hostOnly(req.Host)
	if host == "" {
		return "", true, errors.New("HTTP request without a host")
	}
	return host, true, nil
}

// hostOnly strips the port (and IPv6 brackets) from a Host header value and
// normalizes the name.
func hostOnly(hostport string) string {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return normalizeName(h)
}

// lineState is how far a buffer looks like an HTTP/1.x request line.
type lineState uint8

const (
	lineInvalid  lineState = iota // cannot be one
	linePartial                   // a valid prefix so far
	lineComplete                  // a whole, valid request line
)

// requestLineState checks b against METHOD SP TARGET SP "HTTP/1." DIGIT CRLF.
func requestLineState(b []byte) lineState {
	i := 0
	// Method: 1 to 20 token characters.
	for i < len(b) && isTokenChar(b[i]) {
		i++
		if i > 20 {
			return lineInvalid
		}
	}
	if i == len(b) {
		return linePartial
	}
	if i == 0 || b[i] != ' ' {
		return lineInvalid
	}
	i++
	// Request target: visible ASCII.
	start := i
	for i < len(b) && b[i] > ' ' && b[i] < 0x7f {
		i++
	}
	if i == len(b) {
		return linePartial
	}
	if i == start || b[i] != ' ' {
		return lineInvalid
	}
	i++
	const version = "HTTP/1."
	for j := 0; j < len(version); j, i = j+1, i+1 {
		if i == len(b) {
			return linePartial
		}
		if b[i] != version[j] {
			return lineInvalid
		}
	}
	for _, want := range []func(byte) bool{
		func(c byte) bool { return c >= '0' && c <= '9' },
		func(c byte) bool { return c == '\r' },
		func(c byte) bool { return c == '\n' },
	} {
		if i == len(b) {
			return linePartial
		}
		if !want(b[i]) {
			return lineInvalid
		}
		i++
	}
	return lineComplete
}

func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
