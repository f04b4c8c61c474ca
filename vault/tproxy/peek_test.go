package tproxy_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/vault/tproxy"
)

// clientHello returns the first TLS record a Go client sends for
// serverName (no SNI when serverName is empty or an IP address), offering
// X25519 only, which keeps it small.
func clientHello(t testing.TB, serverName string) []byte {
	t.Helper()
	return clientHelloWith(t, &tls.Config{ServerName: serverName, InsecureSkipVerify: true, CurvePreferences: []tls.CurveID{tls.X25519}})
}

func clientHelloWith(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	c, s := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = tls.Client(c, cfg).Handshake()
	}()
	hdr := make([]byte, 5)
	_, err := io.ReadFull(s, hdr)
	require.NoError(t, err)
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	_, err = io.ReadFull(s, body)
	require.NoError(t, err)
	s.Close()
	c.Close()
	<-done
	return append(hdr, body...)
}

// splitRecord re-frames a single handshake record as two records, the
// first carrying k bytes of the handshake message.
func splitRecord(rec []byte, k int) []byte {
	hdr, body := rec[:5], rec[5:]
	var out []byte
	for _, part := range [][]byte{body[:k], body[k:]} {
		out = append(out, hdr[0], hdr[1], hdr[2], byte(len(part)>>8), byte(len(part)))
		out = append(out, part...)
	}
	return out
}

func TestPeekClientHello(t *testing.T) {
	hello := clientHello(t, "api.example.test")
	tests := []struct {
		name    string
		in      []byte
		reader  func(io.Reader) io.Reader
		size    int
		sni     string
		isTLS   bool
		wantErr bool
	}{
		{name: "SNI", in: hello, sni: "api.example.test", isTLS: true},
		{name: "SNI is lower-cased", in: clientHello(t, "API.Example.TEST"), sni: "api.example.test", isTLS: true},
		{name: "no SNI", in: clientHello(t, ""), isTLS: true},
		{name: "default Go client (post-quantum key share)", in: clientHelloWith(t, &tls.Config{ServerName: "pq.example.test"}), sni: "pq.example.test", isTLS: true},
		{name: "IP server name sends no SNI", in: clientHello(t, "192.0.2.1"), isTLS: true},
		{name: "one byte per read", in: hello, reader: iotest.OneByteReader, sni: "api.example.test", isTLS: true},
		{name: "split handshake header across records", in: splitRecord(hello, 2), sni: "api.example.test", isTLS: true},
		{name: "split body across records", in: splitRecord(hello, 100), sni: "api.example.test", isTLS: true},
		{name: "followed by more data", in: append(bytes.Clone(hello), "trailing"...), sni: "api.example.test", isTLS: true},
		{name: "plain HTTP", in: []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), isTLS: false},
		{name: "SSH banner", in: []byte("SSH-2.0-OpenSSH_9.6\r\n"), isTLS: false},
		{name: "0x16 but not TLS version", in: []byte{0x16, 0x09, 0x01, 0, 5, 1, 0, 0, 1, 0}, isTLS: false},
		{name: "empty", in: nil, isTLS: false, wantErr: true},
		{name: "lone handshake byte", in: []byte{0x16}, isTLS: true, wantErr: true},
		{name: "truncated", in: hello[:60], isTLS: true, wantErr: true},
		{name: "oversized record", in: []byte{0x16, 0x03, 0x01, 0xff, 0xff, 1}, isTLS: true, wantErr: true},
		{name: "not a ClientHello", in: []byte{0x16, 0x03, 0x03, 0, 4, 2, 0, 0, 0}, isTLS: true, wantErr: true},
		{name: "larger than the buffer", in: hello, size: 64, isTLS: true, wantErr: true},
		{name: "alert record in between", in: append(splitRecord(hello, 2)[:7], 0x15, 0x03, 0x03, 0, 2, 2, 40), isTLS: true, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r io.Reader = bytes.NewReader(tt.in)
			if tt.reader != nil {
				r = tt.reader(r)
			}
			size := tt.size
			if size == 0 {
				size = 32 << 10
			}
			br := bufio.NewReaderSize(r, size)
			sni, isTLS, err := tproxy.PeekClientHello(br)
			if tt.wantErr {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tt.sni, sni)
			assert.Equal(t, tt.isTLS, isTLS)
			rest, _ := io.ReadAll(br)
			assert.Equal(t, len(tt.in), len(rest), "nothing consumed")
			assert.True(t, bytes.Equal(tt.in, rest), "nothing consumed")
		})
	}
}

func FuzzPeekClientHello(f *testing.F) {
	hello := clientHello(f, "api.example.test")
	f.Add(hello)
	f.Add(clientHello(f, ""))
	f.Add(splitRecord(hello, 2))
	f.Add(splitRecord(hello, 40))
	f.Add(hello[:70])
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	f.Add([]byte{0x16, 0x03, 0x01, 0x00, 0x04, 0x01, 0x00, 0x00, 0x00})
	f.Fuzz(func(t *testing.T, in []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(in), 4096)
		sni, isTLS, err := tproxy.PeekClientHello(br)
		rest, _ := io.ReadAll(br)
		if !bytes.Equal(in, rest) {
			t.Fatalf("consumed input: %d of %d bytes left", len(rest), len(in))
		}
		if sni != "" {
			if err != nil || !isTLS {
				t.Fatalf("SNI %q with isTLS=%v err=%v", sni, isTLS, err)
			}
			if sni != strings.ToLower(sni) || strings.HasSuffix(sni, ".") || strings.ContainsAny(sni, " /\x00:") {
				t.Fatalf("SNI %q not normalized", sni)
			}
		}
		if len(in) > 0 && in[0] != 0x16 && isTLS {
			t.Fatalf("isTLS for first byte %#x", in[0])
		}
	})
}
