package execd_test

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/execd/osbackend"
)

// wsClient is a minimal WebSocket client for tests.
type wsClient struct {
	nc net.Conn
	br *bufio.Reader
}

func dialWS(t *testing.T, srvURL, path string) *wsClient {
	t.Helper()
	addr := strings.TrimPrefix(srvURL, "http://")
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	var key [16]byte
	_, _ = rand.Read(key[:])
	req := "GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + base64.StdEncoding.EncodeToString(key[:]) + "\r\n\r\n"
	if _, err := io.WriteString(nc, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %v %v", resp, err)
	}
	return &wsClient{nc: nc, br: br}
}

func (c *wsClient) send(t *testing.T, op byte, payload []byte) {
	t.Helper()
	mask := [4]byte{9, 8, 7, 6}
	hdr := []byte{0x80 | op}
	switch n := len(payload); {
	case n < 126:
		hdr = append(hdr, 0x80|byte(n))
	case n <= 0xffff:
		hdr = append(hdr, 0x80|126, byte(n>>8), byte(n))
	default:
		hdr = append(hdr, 0x80|127)
		hdr = binary.BigEndian.AppendUint64(hdr, uint64(n))
	}
	hdr = append(hdr, mask[:]...)
	body := bytes.Clone(payload)
	for i := range body {
		body[i] ^= mask[i&3]
	}
	if _, err := c.nc.Write(append(hdr, body...)); err != nil {
		t.Fatal(err)
	}
}

func (c *wsClient) sendJSON(t *testing.T, v any) {
	t.Helper()
	b, _ := json.Marshal(v)
	c.send(t, 0x1, b)
}

// read returns the next frame's opcode and payload (server frames are
// never masked or fragmented).
func (c *wsClient) read(t *testing.T) (byte, []byte) {
	t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	var h [2]byte
	if _, err := io.ReadFull(c.br, h[:]); err != nil {
		t.Fatalf("read frame: %v", err)
	}
	n := int(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		io.ReadFull(c.br, b[:])
		n = int(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		io.ReadFull(c.br, b[:])
		n = int(binary.BigEndian.Uint64(b[:]))
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(c.br, p); err != nil {
		t.Fatalf("read payload: %v", err)
	}
	return h[0] & 0x0f, p
}

// readUntil reads frames until the terminal output contains want or an
// exit message arrives; it returns the output and the exit message.
func (c *wsClient) readUntil(t *testing.T, want string) (string, map[string]any) {
	t.Helper()
	var out strings.Builder
	for {
		op, p := c.read(t)
		switch op {
		case 0x2:
			if len(p) > 0 && (p[0] == 0x01 || p[0] == 0x03) {
				out.Write(p[1:])
			}
		case 0x1:
			var m map[string]any
			_ = json.Unmarshal(p, &m)
			if m["type"] == "exit" {
				return out.String(), m
			}
		case 0x8:
			return out.String(), nil
		}
		if want != "" && strings.Contains(out.String(), want) {
			return out.String(), nil
		}
	}
}

func newPTYServer(t *testing.T) *httptest.Server {
	t.Helper()
	b, err := osbackend.New(osbackend.Options{RootDir: t.TempDir(), Env: append(os.Environ(), "PS1=$ ")})
	if err != nil {
		t.Fatal(err)
	}
	h, err := execd.New(execd.Options{Executor: b})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		h.Close()
		b.Close()
	})
	return srv
}

func createPTY(t *testing.T, srv *httptest.Server, body string) string {
	t.Helper()
	resp, err := http.Post(srv.URL+"/pty", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		SessionID string `json:"session_id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK || out.SessionID == "" {
		t.Fatalf("create: %d %v %+v", resp.StatusCode, err, out)
	}
	return out.SessionID
}

func TestPTYOverWebSocket(t *testing.T) {
	srv := newPTYServer(t)
	id := createPTY(t, srv, `{"command":"bash --noprofile --norc -i","cols":90,"rows":20}`)
	c := dialWS(t, srv.URL, "/pty/"+id+"/ws")

	op, p := c.read(t)
	var hello map[string]any
	if op != 0x1 || json.Unmarshal(p, &hello) != nil || hello["type"] != "connected" || hello["session_id"] != id {
		t.Fatalf("first message %d %q", op, p)
	}
	c.send(t, 0x2, append([]byte{0x00}, "stty size\n"...))
	if out, _ := c.readUntil(t, "20 90"); !strings.Contains(out, "20 90") {
		t.Fatalf("size output %q", out)
	}
	c.sendJSON(t, map[string]any{"type": "resize", "cols": 120, "rows": 40})
	c.sendJSON(t, map[string]any{"type": "stdin", "data": "stty size\n"})
	if out, _ := c.readUntil(t, "40 120"); !strings.Contains(out, "40 120") {
		t.Fatalf("resized output %q", out)
	}
	c.sendJSON(t, map[string]any{"type": "ping"})
	for {
		op, p := c.read(t)
		if op == 0x1 && strings.Contains(string(p), "pong") {
			break
		}
	}
	// SIGINT stops the foreground command, not the shell.
	c.sendJSON(t, map[string]any{"type": "stdin", "data": "sleep 30\n"})
	time.Sleep(300 * time.Millisecond)
	c.sendJSON(t, map[string]any{"type": "signal", "signal": "SIGINT"})
	c.sendJSON(t, map[string]any{"type": "stdin", "data": "echo still-$((40+2))\n"})
	if out, _ := c.readUntil(t, "still-42"); !strings.Contains(out, "still-42") {
		t.Fatalf("after SIGINT %q", out)
	}

	// A second client gets the replay and takes over.
	c2 := dialWS(t, srv.URL, "/pty/"+id+"/ws")
	c2.read(t) // connected
	op, p = c2.read(t)
	if op != 0x2 || p[0] != 0x03 || !strings.Contains(string(p), "still-42") {
		t.Fatalf("replay %d %q", op, p)
	}
	c2.sendJSON(t, map[string]any{"type": "stdin", "data": "exit 5\n"})
	_, exit := c2.readUntil(t, "")
	if exit == nil || exit["exit_code"] != float64(5) {
		t.Fatalf("exit message %v", exit)
	}
}

func TestPTYErrors(t *testing.T) {
	srv := newPTYServer(t)
	resp, err := http.Get(srv.URL + "/pty/nope/ws")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown terminal: %d", resp.StatusCode)
	}
	id := createPTY(t, srv, `{"command":"sleep 30"}`)
	resp, err = http.Get(srv.URL + "/pty/" + id + "/ws") // not a WebSocket request
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("plain GET: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/pty/"+id, nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("delete: %d", resp.StatusCode)
	}
	resp, err = http.Post(srv.URL+"/pty", "application/json", strings.NewReader(`{"cwd":"/missing"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("missing cwd: %d", resp.StatusCode)
	}
}

// TestPTYCloseLeavesNothing: closing the handler (what deleting a sandbox
// does) ends every terminal: no program, descriptor or goroutine is left,
// and an attached client is disconnected.
func TestPTYCloseLeavesNothing(t *testing.T) {
	b, err := osbackend.New(osbackend.Options{RootDir: t.TempDir(), Env: append(os.Environ(), "PS1=$ ")})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	h, err := execd.New(execd.Options{Executor: b})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	http.DefaultClient.CloseIdleConnections()
	baseFDs, baseG := countFDs(t), runtime.NumGoroutine()

	marker := fmt.Sprintf("9%07d", time.Now().UnixNano()%10000000)
	for range 3 {
		createPTY(t, srv, `{"command":"sleep `+marker+`"}`)
	}
	id := createPTY(t, srv, `{"command":"bash --noprofile --norc -i"}`)
	c := dialWS(t, srv.URL, "/pty/"+id+"/ws")
	c.read(t) // connected
	// The terminals' programs start asynchronously: wait until all three run.
	for deadline := time.Now().Add(5 * time.Second); processesWith(t, marker) != 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d processes run sleep %s, want 3", processesWith(t, marker), marker)
		}
	}

	h.Close()

	// The attached client is told to go away, then the connection ends.
	_ = c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		op, _, err := c.readErr()
		if err != nil || op == 0x8 {
			break
		}
	}
	c.nc.Close()
	http.DefaultClient.CloseIdleConnections()
	// Creating a terminal after close is refused.
	resp, err := http.Post(srv.URL+"/pty", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("create after close: %d, want 503", resp.StatusCode)
	}
	http.DefaultClient.CloseIdleConnections()

	deadline := time.Now().Add(5 * time.Second)
	for {
		procs, fds, g := processesWith(t, marker), countFDs(t), runtime.NumGoroutine()
		if procs == 0 && fds <= baseFDs && g <= baseG {
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("after close: %d processes (want 0), %d descriptors (was %d), %d goroutines (was %d)\n%s",
				procs, fds, baseFDs, g, baseG, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readErr reads one frame, returning an error instead of failing.
func (c *wsClient) readErr() (byte, []byte, error) {
	var h [2]byte
	if _, err := io.ReadFull(c.br, h[:]); err != nil {
		return 0, nil, err
	}
	n := int(h[1] & 0x7f)
	switch n {
	case 126:
		var e [2]byte
		if _, err := io.ReadFull(c.br, e[:]); err != nil {
			return 0, nil, err
		}
		n = int(binary.BigEndian.Uint16(e[:]))
	case 127:
		var e [8]byte
		if _, err := io.ReadFull(c.br, e[:]); err != nil {
			return 0, nil, err
		}
		n = int(binary.BigEndian.Uint64(e[:]))
	}
	p := make([]byte, n)
	_, err := io.ReadFull(c.br, p)
	return h[0] & 0x0f, p, err
}

// countFDs counts this process's open descriptors.
func countFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	return len(ents)
}

// processesWith counts live processes whose command line contains s.
func processesWith(t *testing.T, s string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	n := 0
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(cmd, []byte(s)) {
			continue
		}
		if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil && bytes.Contains(st, []byte(") Z ")) {
			continue // a zombie is not running
		}
		n++
	}
	return n
}

// TestSessionRunCwd: a session run's own cwd holds for that run only (bash
// sessions of containers; the wasm shell has the same test in server).
func TestSessionRunCwd(t *testing.T) {
	// In a container the executor's root is /; so it is here (the paths a
	// session's shell sees are the host's).
	root := t.TempDir()
	for _, d := range []string{"a", "b"} {
		if err := os.Mkdir(root+"/"+d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := osbackend.New(osbackend.Options{RootDir: "/", Env: os.Environ()})
	if err != nil {
		t.Fatal(err)
	}
	h, err := execd.New(execd.Options{Executor: b})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); h.Close(); b.Close() })
	post := func(path, body string) string {
		t.Helper()
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	var sess struct {
		SessionID string `json:"session_id"`
	}
	if err := json.Unmarshal([]byte(post("/session", `{"cwd":"`+root+`/a"}`)), &sess); err != nil {
		t.Fatal(err)
	}
	run := "/session/" + sess.SessionID + "/run"
	if out := post(run, `{"command":"pwd; cd /; V=1","cwd":"`+root+`/b"}`); !strings.Contains(out, `"text":"`+root+`/b"`) {
		t.Errorf("run with cwd b printed %s", out)
	}
	if out := post(run, `{"command":"pwd; echo v=$V"}`); !strings.Contains(out, `"text":"`+root+`/a"`) || !strings.Contains(out, `"text":"v=1"`) {
		t.Errorf("the next run is not back in a with V kept: %s", out)
	}
}
