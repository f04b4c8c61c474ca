package execd

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// A minimal server side of the WebSocket protocol (RFC 6455), enough for
// the PTY endpoint: the opening handshake, text, binary, ping, pong and
// close frames, client masking, fragmented messages and size limits. No
// extensions and no subprotocols.

// WebSocket opcodes.
const (
	wsOpContinuation byte = 0x0
	wsOpText         byte = 0x1
	wsOpBinary       byte = 0x2
	wsOpClose        byte = 0x8
	wsOpPing         byte = 0x9
	wsOpPong         byte = 0xA
)

// WebSocket close codes.
const (
	wsCloseNormal        = 1000
	wsCloseGoingAway     = 1001
	wsCloseProtocolError = 1002
	wsCloseNoStatus      = 1005
	wsCloseInvalidData   = 1007
	wsCloseTooBig        = 1009
)

// wsGUID is appended to the client's key to form the accept value.
const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// wsMaxControl is the largest payload of a control frame.
const wsMaxControl = 125

var (
	errWSProtocol = errors.New("websocket: protocol error")
	errWSTooBig   = errors.New("websocket: message too big")
	errWSBadUTF8  = errors.New("websocket: text message is not valid UTF-8")
)

// wsClosedError is returned by readMessage after the peer's close frame.
type wsClosedError struct {
	Code   int
	Reason string
}

func (e *wsClosedError) Error() string {
	return fmt.Sprintf("websocket: closed by peer (%d %s)", e.Code, e.Reason)
}

// wsFrame is one frame as read from the wire, unmasked.
type wsFrame struct {
	fin     bool
	op      byte
	payload []byte
}

// readWSFrame reads one frame. Client frames must be masked (requireMask);
// payloads longer than maxPayload are refused before they are read.
func readWSFrame(r io.Reader, requireMask bool, maxPayload int64) (wsFrame, error) {
	var hdr [14]byte
	if _, err := io.ReadFull(r, hdr[:2]); err != nil {
		return wsFrame{}, err
	}
	f := wsFrame{fin: hdr[0]&0x80 != 0, op: hdr[0] & 0x0f}
	if hdr[0]&0x70 != 0 {
		return wsFrame{}, fmt.Errorf("%w: reserved bits set without an extension", errWSProtocol)
	}
	switch f.op {
	case wsOpContinuation, wsOpText, wsOpBinary:
	case wsOpClose, wsOpPing, wsOpPong:
		if !f.fin {
			return wsFrame{}, fmt.Errorf("%w: fragmented control frame", errWSProtocol)
		}
	default:
		return wsFrame{}, fmt.Errorf("%w: unknown opcode %#x", errWSProtocol, f.op)
	}
	masked := hdr[1]&0x80 != 0
	if masked != requireMask {
		return wsFrame{}, fmt.Errorf("%w: frame masking is wrong for this side", errWSProtocol)
	}
	n := int64(hdr[1] & 0x7f)
	switch n {
	case 126:
		if _, err := io.ReadFull(r, hdr[2:4]); err != nil {
			return wsFrame{}, unexpected(err)
		}
		n = int64(binary.BigEndian.Uint16(hdr[2:4]))
		if n < 126 {
			return wsFrame{}, fmt.Errorf("%w: length not minimally encoded", errWSProtocol)
		}
	case 127:
		if _, err := io.ReadFull(r, hdr[2:10]); err != nil {
			return wsFrame{}, unexpected(err)
		}
		u := binary.BigEndian.Uint64(hdr[2:10])
		if u>>63 != 0 {
			return wsFrame{}, fmt.Errorf("%w: length has its top bit set", errWSProtocol)
		}
		if u <= 0xffff {
			return wsFrame{}, fmt.Errorf("%w: length not minimally encoded", errWSProtocol)
		}
		n = int64(u)
	}
	if f.op >= wsOpClose && n > wsMaxControl {
		return wsFrame{}, fmt.Errorf("%w: control frame of %d bytes", errWSProtocol, n)
	}
	if n > maxPayload {
		return wsFrame{}, fmt.Errorf("%w: frame of %d bytes, limit %d", errWSTooBig, n, maxPayload)
	}
	var key [4]byte
	if masked {
		if _, err := io.ReadFull(r, key[:]); err != nil {
			return wsFrame{}, unexpected(err)
		}
	}
	f.payload = make([]byte, n)
	if _, err := io.ReadFull(r, f.payload); err != nil {
		return wsFrame{}, unexpected(err)
	}
	if masked {
		wsMask(key, f.payload)
	}
	return f, nil
}

// unexpected turns EOF inside a frame into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// wsMask applies (or removes) a masking key in place.
func wsMask(key [4]byte, p []byte) {
	for i := range p {
		p[i] ^= key[i&3]
	}
}

// appendWSFrame appends one frame. A non-nil key masks the payload (the
// client side; servers never mask).
func appendWSFrame(dst []byte, fin bool, op byte, payload []byte, key *[4]byte) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	var m byte
	if key != nil {
		m = 0x80
	}
	n := len(payload)
	switch {
	case n < 126:
		dst = append(dst, b0, m|byte(n))
	case n <= 0xffff:
		dst = append(dst, b0, m|126, byte(n>>8), byte(n))
	default:
		dst = append(dst, b0, m|127)
		dst = binary.BigEndian.AppendUint64(dst, uint64(n))
	}
	if key == nil {
		return append(dst, payload...)
	}
	dst = append(dst, key[:]...)
	start := len(dst)
	dst = append(dst, payload...)
	wsMask(*key, dst[start:])
	return dst
}

// wsConn is the server side of one WebSocket connection. One goroutine may
// read while others write.
type wsConn struct {
	br         *bufio.Reader
	w          io.Writer
	closer     io.Closer
	nc         net.Conn // for write deadlines; nil in fuzz tests
	maxMessage int64

	wmu       sync.Mutex
	closeSent bool
}

// wsWriteTimeout bounds one write to a client.
const wsWriteTimeout = 10 * time.Second

// headerHasToken reports whether a comma-separated header has token.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// wsAccept computes Sec-WebSocket-Accept for a client key.
func wsAccept(key string) string {
	h := sha1.Sum([]byte(key + wsGUID))
	return base64.StdEncoding.EncodeToString(h[:])
}

// upgradeWebSocket performs the opening handshake and takes over the
// connection. On failure it has written an error response.
func upgradeWebSocket(w http.ResponseWriter, r *http.Request, maxMessage int64) (*wsConn, error) {
	fail := func(code api.ErrorCode, msg string) (*wsConn, error) {
		writeError(w, code, msg)
		return nil, errors.New("websocket: " + msg)
	}
	if r.Method != http.MethodGet {
		return fail(CodeMethodNotAllowed, "a WebSocket handshake must use GET")
	}
	if !headerHasToken(r.Header, "Connection", "upgrade") || !headerHasToken(r.Header, "Upgrade", "websocket") {
		return fail(CodeInvalidRequestBody, "this endpoint needs a WebSocket connection (Upgrade: websocket)")
	}
	if r.Header.Get("Sec-WebSocket-Version") != "13" {
		w.Header().Set("Sec-WebSocket-Version", "13")
		return fail(api.ErrorCodeUPGRADEREQUIRED, "unsupported Sec-WebSocket-Version; use 13")
	}
	key := r.Header.Get("Sec-WebSocket-Key")
	if raw, err := base64.StdEncoding.DecodeString(key); err != nil || len(raw) != 16 {
		return fail(CodeInvalidRequestBody, "invalid Sec-WebSocket-Key")
	}
	nc, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return fail(CodeInternal, "connection cannot be taken over for a WebSocket")
	}
	resp := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + wsAccept(key) + "\r\n\r\n"
	_ = nc.SetDeadline(time.Now().Add(wsWriteTimeout))
	if _, err := io.WriteString(nc, resp); err != nil {
		nc.Close()
		return nil, fmt.Errorf("websocket: handshake: %w", err)
	}
	_ = nc.SetDeadline(time.Time{})
	return &wsConn{br: brw.Reader, w: nc, closer: nc, nc: nc, maxMessage: maxMessage}, nil
}

// readMessage returns the next text or binary message, answering pings
// and the peer's close on the way. After the peer's close it returns a
// *wsClosedError; after a protocol violation it sends a close frame with
// the matching code and returns the error.
func (c *wsConn) readMessage() (op byte, data []byte, err error) {
	var msgOp byte
	var msg []byte
	inMessage := false
	for {
		f, err := readWSFrame(c.br, true, c.maxMessage)
		if err != nil {
			return 0, nil, c.fail(err)
		}
		switch f.op {
		case wsOpPing:
			if err := c.write(wsOpPong, f.payload); err != nil {
				return 0, nil, err
			}
			continue
		case wsOpPong:
			continue
		case wsOpClose:
			ce, err := parseClose(f.payload)
			if err != nil {
				return 0, nil, c.fail(err)
			}
			code := ce.Code
			if code == wsCloseNoStatus {
				code = wsCloseNormal
			}
			_ = c.writeClose(code, "")
			return 0, nil, ce
		case wsOpContinuation:
			if !inMessage {
				return 0, nil, c.fail(fmt.Errorf("%w: continuation without a message", errWSProtocol))
			}
		default: // text or binary
			if inMessage {
				return 0, nil, c.fail(fmt.Errorf("%w: new message inside a fragmented one", errWSProtocol))
			}
			inMessage, msgOp = true, f.op
		}
		if int64(len(msg))+int64(len(f.payload)) > c.maxMessage {
			return 0, nil, c.fail(fmt.Errorf("%w: message over %d bytes", errWSTooBig, c.maxMessage))
		}
		msg = append(msg, f.payload...)
		if !f.fin {
			continue
		}
		if msgOp == wsOpText && !utf8.Valid(msg) {
			return 0, nil, c.fail(errWSBadUTF8)
		}
		if msg == nil {
			msg = []byte{}
		}
		return msgOp, msg, nil
	}
}

// parseClose decodes a close frame's payload.
func parseClose(p []byte) (*wsClosedError, error) {
	switch {
	case len(p) == 0:
		return &wsClosedError{Code: wsCloseNoStatus}, nil
	case len(p) == 1:
		return nil, fmt.Errorf("%w: close frame of one byte", errWSProtocol)
	}
	code := int(binary.BigEndian.Uint16(p))
	valid := (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1011) || (code >= 3000 && code <= 4999)
	if !valid {
		return nil, fmt.Errorf("%w: close code %d", errWSProtocol, code)
	}
	if !utf8.Valid(p[2:]) {
		return nil, errWSBadUTF8
	}
	return &wsClosedError{Code: code, Reason: string(p[2:])}, nil
}

// fail sends the close frame that matches a read error and returns it.
func (c *wsConn) fail(err error) error {
	switch {
	case errors.Is(err, errWSTooBig):
		_ = c.writeClose(wsCloseTooBig, "message too big")
	case errors.Is(err, errWSBadUTF8):
		_ = c.writeClose(wsCloseInvalidData, "invalid UTF-8")
	case errors.Is(err, errWSProtocol):
		_ = c.writeClose(wsCloseProtocolError, "protocol error")
	}
	return err
}

// write sends one unfragmented message or control frame.
func (c *wsConn) write(op byte, payload []byte) error {
	buf := appendWSFrame(make([]byte, 0, len(payload)+10), true, op, payload, nil)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closeSent {
		return errors.New("websocket: connection closing")
	}
	return c.writeLocked(buf)
}

func (c *wsConn) writeLocked(buf []byte) error {
	if c.nc != nil {
		_ = c.nc.SetWriteDeadline(time.Now().Add(wsWriteTimeout))
	}
	_, err := c.w.Write(buf)
	return err
}

// writeClose sends a close frame once; later writes fail.
func (c *wsConn) writeClose(code int, reason string) error {
	if len(reason) > wsMaxControl-2 {
		reason = reason[:utf8Cut([]byte(reason), wsMaxControl-2)]
	}
	p := binary.BigEndian.AppendUint16(nil, uint16(code))
	p = append(p, reason...)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closeSent {
		return nil
	}
	c.closeSent = true
	return c.writeLocked(appendWSFrame(nil, true, wsOpClose, p, nil))
}

// close sends a close frame (if none was sent) and closes the connection.
func (c *wsConn) close(code int, reason string) error {
	_ = c.writeClose(code, reason)
	return c.closer.Close()
}
