package execd

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

var testKey = [4]byte{1, 2, 3, 4}

func clientFrame(fin bool, op byte, payload []byte) []byte {
	return appendWSFrame(nil, fin, op, payload, &testKey)
}

// fakeConn reads a fixed byte stream and records what is written.
func fakeConn(in []byte, max int64) (*wsConn, *bytes.Buffer) {
	var out bytes.Buffer
	return &wsConn{br: bufio.NewReader(bytes.NewReader(in)), w: &out, closer: io.NopCloser(nil), maxMessage: max}, &out
}

func TestWSAccept(t *testing.T) {
	// The example of RFC 6455 section 1.3.
	if got := wsAccept("dGhlIHNhbXBsZSBub25jZQ=="); got != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		t.Fatalf("accept %q", got)
	}
}

func TestWSReadMessage(t *testing.T) {
	long := bytes.Repeat([]byte("x"), 70000)
	cases := []struct {
		name    string
		in      []byte
		max     int64
		op      byte
		data    string
		err     error
		written []byte // what the server must answer first, if anything
	}{
		{name: "text", in: clientFrame(true, wsOpText, []byte("hi")), op: wsOpText, data: "hi"},
		{name: "binary 16-bit length", in: clientFrame(true, wsOpBinary, long[:300]), op: wsOpBinary, data: string(long[:300])},
		{name: "binary 64-bit length", in: clientFrame(true, wsOpBinary, long), op: wsOpBinary, data: string(long)},
		{name: "fragments with a ping between", in: bytes.Join([][]byte{
			clientFrame(false, wsOpText, []byte("he")), clientFrame(true, wsOpPing, []byte("p")),
			clientFrame(false, wsOpContinuation, []byte("ll")), clientFrame(true, wsOpContinuation, []byte("o"))}, nil),
			op: wsOpText, data: "hello", written: appendWSFrame(nil, true, wsOpPong, []byte("p"), nil)},
		{name: "pong ignored", in: append(clientFrame(true, wsOpPong, nil), clientFrame(true, wsOpText, []byte("a"))...), op: wsOpText, data: "a"},
		{name: "empty message", in: clientFrame(true, wsOpBinary, nil), op: wsOpBinary, data: ""},
		{name: "unmasked frame", in: appendWSFrame(nil, true, wsOpText, []byte("a"), nil), err: errWSProtocol},
		{name: "reserved bits", in: append([]byte{0xC1}, clientFrame(true, wsOpText, []byte("a"))[1:]...), err: errWSProtocol},
		{name: "unknown opcode", in: clientFrame(true, 0x3, nil), err: errWSProtocol},
		{name: "fragmented control", in: clientFrame(false, wsOpPing, nil), err: errWSProtocol},
		{name: "long control", in: clientFrame(true, wsOpPing, long[:126]), err: errWSProtocol},
		{name: "orphan continuation", in: clientFrame(true, wsOpContinuation, []byte("a")), err: errWSProtocol},
		{name: "message inside message", in: append(clientFrame(false, wsOpText, []byte("a")), clientFrame(true, wsOpText, []byte("b"))...), err: errWSProtocol},
		{name: "frame too big", in: clientFrame(true, wsOpBinary, long[:200]), max: 100, err: errWSTooBig,
			written: appendWSFrame(nil, true, wsOpClose, append(binary.BigEndian.AppendUint16(nil, wsCloseTooBig), "message too big"...), nil)},
		{name: "fragments too big", in: append(clientFrame(false, wsOpBinary, long[:60]), clientFrame(true, wsOpContinuation, long[:60])...), max: 100, err: errWSTooBig},
		{name: "bad UTF-8", in: clientFrame(true, wsOpText, []byte{0xff, 0xfe}), err: errWSBadUTF8},
		{name: "non-minimal length", in: []byte{0x81, 0x80 | 126, 0, 5, 1, 2, 3, 4, 'a', 'b', 'c', 'd', 'e'}, err: errWSProtocol},
		{name: "truncated", in: clientFrame(true, wsOpText, []byte("hello"))[:8], err: io.ErrUnexpectedEOF},
		{name: "close with bad code", in: clientFrame(true, wsOpClose, binary.BigEndian.AppendUint16(nil, 999)), err: errWSProtocol},
		{name: "close of one byte", in: clientFrame(true, wsOpClose, []byte{3}), err: errWSProtocol},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			max := c.max
			if max == 0 {
				max = 1 << 20
			}
			conn, out := fakeConn(c.in, max)
			op, data, err := conn.readMessage()
			if c.err != nil {
				if !errors.Is(err, c.err) {
					t.Fatalf("err %v, want %v", err, c.err)
				}
			} else if err != nil || op != c.op || string(data) != c.data {
				t.Fatalf("op %d data %.20q err %v", op, data, err)
			}
			if c.written != nil && !bytes.HasPrefix(out.Bytes(), c.written) {
				t.Fatalf("server wrote %q, want %q first", out.Bytes(), c.written)
			}
		})
	}
}

func TestWSCloseHandshake(t *testing.T) {
	payload := append(binary.BigEndian.AppendUint16(nil, 1001), "bye"...)
	conn, out := fakeConn(clientFrame(true, wsOpClose, payload), 1<<20)
	_, _, err := conn.readMessage()
	var ce *wsClosedError
	if !errors.As(err, &ce) || ce.Code != 1001 || ce.Reason != "bye" {
		t.Fatalf("err %v", err)
	}
	want := appendWSFrame(nil, true, wsOpClose, binary.BigEndian.AppendUint16(nil, 1001), nil)
	if !bytes.Equal(out.Bytes(), want) {
		t.Fatalf("close answer %q, want %q", out.Bytes(), want)
	}
	if err := conn.write(wsOpText, []byte("late")); err == nil {
		t.Fatal("write after close succeeded")
	}
}

func TestWSUpgrade(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := upgradeWebSocket(w, r, 1<<20)
		if err != nil {
			return
		}
		defer c.closer.Close()
		op, data, err := c.readMessage()
		if err == nil {
			_ = c.write(op, append([]byte("echo:"), data...))
		}
	}))
	defer srv.Close()

	cases := []struct {
		name    string
		headers string
		status  string
	}{
		{name: "ok", headers: "Upgrade: websocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", status: "101"},
		{name: "no upgrade", headers: "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", status: "400"},
		{name: "old version", headers: "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 8\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", status: "426"},
		{name: "bad key", headers: "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: short\r\n", status: "400"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			nc, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.WriteString(nc, "GET /ws HTTP/1.1\r\nHost: x\r\n"+c.headers+"\r\n"); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(nc)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(resp.Status, c.status) {
				t.Fatalf("status %s", resp.Status)
			}
			if c.status != "101" {
				return
			}
			if resp.Header.Get("Sec-WebSocket-Accept") != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
				t.Fatalf("accept %q", resp.Header.Get("Sec-WebSocket-Accept"))
			}
			if _, err := nc.Write(clientFrame(true, wsOpText, []byte("hi"))); err != nil {
				t.Fatal(err)
			}
			f, err := readWSFrame(br, false, 1<<20)
			if err != nil || f.op != wsOpText || string(f.payload) != "echo:hi" {
				t.Fatalf("frame %+v err %v", f, err)
			}
		})
	}
}

func FuzzWSFrame(f *testing.F) {
	f.Add(clientFrame(true, wsOpText, []byte("hello")))
	f.Add(clientFrame(false, wsOpBinary, bytes.Repeat([]byte{7}, 300)))
	f.Add(clientFrame(true, wsOpClose, []byte{3, 232, 'o', 'k'}))
	f.Add([]byte{0x81, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		fr, err := readWSFrame(bytes.NewReader(in), true, 1<<16)
		if err == nil {
			// A frame that parses encodes back to a frame that parses the same.
			again, err := readWSFrame(bytes.NewReader(clientFrame(fr.fin, fr.op, fr.payload)), true, 1<<16)
			if err != nil || again.fin != fr.fin || again.op != fr.op || !bytes.Equal(again.payload, fr.payload) {
				t.Fatalf("round trip: %+v vs %+v (%v)", fr, again, err)
			}
		}
		// Whole-message reading must not panic, loop or exceed its limit.
		conn, _ := fakeConn(in, 1<<10)
		for range 64 {
			_, data, err := conn.readMessage()
			if err != nil {
				break
			}
			if len(data) > 1<<10 {
				t.Fatalf("message of %d bytes over the limit", len(data))
			}
		}
	})
}
