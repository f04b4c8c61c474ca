package tproxy

import (
	"bufio"
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPeekHTTPHost(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		oneByte bool
		size    int
		host    string
		isHTTP  bool
		wantErr bool
	}{
		{name: "Host header", in: "GET /x HTTP/1.1\r\nHost: API.example.test\r\n\r\nbody", host: "api.example.test", isHTTP: true},
		{name: "Host with port", in: "POST / HTTP/1.1\r\nHost: api.example.test:8080\r\nContent-Length: 0\r\n\r\n", host: "api.example.test", isHTTP: true},
		{name: "IPv6 Host", in: "GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n", host: "2001:db8::1", isHTTP: true},
		{name: "absolute form", in: "GET http://abs.example.test/p HTTP/1.1\r\nHost: other\r\n\r\n", host: "abs.example.test", isHTTP: true},
		{name: "one byte per read", in: "GET / HTTP/1.1\r\nHost: slow.example.test\r\n\r\n", oneByte: true, host: "slow.example.test", isHTTP: true},
		{name: "HTTP/1.0 without Host", in: "GET / HTTP/1.0\r\n\r\n", isHTTP: true, wantErr: true},
		{name: "TLS", in: "\x16\x03\x01\x00\x10", isHTTP: false},
		{name: "SSH", in: "SSH-2.0-x\r\n", isHTTP: false},
		{name: "HTTP/2 preface", in: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", isHTTP: false},
		{name: "control byte in target", in: "GET /\x01 HTTP/1.1\r\n", isHTTP: false},
		{name: "truncated head", in: "GET / HTTP/1.1\r\nHost: a", isHTTP: true, wantErr: true},
		{name: "head too large", in: "GET / HTTP/1.1\r\nX: " + strings.Repeat("a", 100) + "\r\n\r\n", size: 64, isHTTP: true, wantErr: true},
		{name: "malformed header", in: "GET / HTTP/1.1\r\nno colon\r\n\r\n", isHTTP: true, wantErr: true},
		{name: "empty", in: "", isHTTP: false, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r io.Reader = strings.NewReader(tt.in)
			if tt.oneByte {
				r = iotest.OneByteReader(r)
			}
			size := tt.size
			if size == 0 {
				size = 4096
			}
			br := bufio.NewReaderSize(r, size)
			host, isHTTP, err := peekHTTPHost(br)
			if tt.wantErr {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tt.host, host)
			assert.Equal(t, tt.isHTTP, isHTTP)
			rest, _ := io.ReadAll(br)
			assert.Equal(t, tt.in, string(rest), "nothing consumed")
		})
	}
}

func FuzzPeekHTTPHost(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a.example\r\n\r\n"))
	f.Add([]byte("GET http://x/ HTTP/1.1\r\n\r\n"))
	f.Add([]byte("PUT /a?b HTTP/1.0\r\nHost: [::1]:8\r\n\r\n"))
	f.Add([]byte("\x16\x03\x01"))
	f.Fuzz(func(t *testing.T, in []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(in), 1024)
		host, isHTTP, err := peekHTTPHost(br)
		rest, _ := io.ReadAll(br)
		if !bytes.Equal(in, rest) {
			t.Fatalf("consumed input")
		}
		if host != "" && (err != nil || !isHTTP) {
			t.Fatalf("host %q with isHTTP=%v err=%v", host, isHTTP, err)
		}
		if host != strings.ToLower(host) {
			t.Fatalf("host %q not lower-case", host)
		}
	})
}
