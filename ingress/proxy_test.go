package ingress_test

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/hybox-dev/hybox/ingress"
	"github.com/hybox-dev/hybox/internal/duplextest"
)

func TestProxyHTTP(t *testing.T) {
	for _, k := range targetKinds {
		t.Run(k.name, func(t *testing.T) {
			g := newGateway(t, k.make(t, newUpstream()), nil)
			tests := []struct {
				name, method, path, host, body string
				headers                        []string
				wantPath, wantEscaped, wantQ   string
				wantPrefix                     string
			}{
				{name: "GET by path", method: "GET", path: "/" + sbID + "/8080/a/b?x=1&y=2",
					wantPath: "/a/b", wantEscaped: "/a/b", wantQ: "x=1&y=2", wantPrefix: "/" + sbID + "/8080"},
				{name: "POST by path", method: "POST", path: "/" + sbID + "/8080/submit", body: "hello body",
					wantPath: "/submit", wantEscaped: "/submit", wantPrefix: "/" + sbID + "/8080"},
				{name: "bare port path", method: "GET", path: "/" + sbID + "/8080",
					wantPath: "/", wantEscaped: "/", wantPrefix: "/" + sbID + "/8080"},
				{name: "escaped slash kept", method: "GET", path: "/" + sbID + "/8080/a%2Fb/c%20d",
					wantPath: "/a/b/c d", wantEscaped: "/a%2Fb/c%20d", wantPrefix: "/" + sbID + "/8080"},
				{name: "PUT by header", method: "PUT", path: "/up/load?q", body: strings.Repeat("z", 100000),
					headers: []string{ingress.HeaderIngressTo, sbID + "-8080"}, wantPath: "/up/load", wantEscaped: "/up/load", wantQ: "q"},
				{name: "GET by host", method: "GET", path: "/index.html", host: sbID + "-8080." + domain + ":443",
					wantPath: "/index.html", wantEscaped: "/index.html"},
				{name: "host is case-insensitive", method: "GET", path: "/", host: strings.ToUpper(sbID) + "-8080.SBX.Example.TEST.",
					wantPath: "/", wantEscaped: "/"},
			}
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					headers := append([]string{
						"X-Forwarded-For", "6.6.6.6",
						"X-Forwarded-Prefix", "/spoofed",
						"OPEN-SANDBOX-API-KEY", "server-secret",
						ingress.HeaderRouteToken, "tok",
						"Connection", "X-Hop",
						"X-Hop", "must not pass",
						"X-Custom", "kept",
					}, tc.headers...)
					resp, b := g.do(t, tc.method, tc.path, tc.host, tc.body, headers...)
					if resp.StatusCode != http.StatusOK {
						t.Fatalf("status %d, body %s", resp.StatusCode, b)
					}
					e := decodeEcho(t, b)
					if e.Method != tc.method || e.Path != tc.wantPath || e.Escaped != tc.wantEscaped || e.Query != tc.wantQ || e.Body != tc.body {
						t.Errorf("upstream saw %s %q (%q) ?%q body %d bytes; want %s %q (%q) ?%q body %d bytes",
							e.Method, e.Path, e.Escaped, e.Query, len(e.Body), tc.method, tc.wantPath, tc.wantEscaped, tc.wantQ, len(tc.body))
					}
					h := e.Header
					for _, name := range []string{"OPEN-SANDBOX-API-KEY", ingress.HeaderRouteToken, ingress.HeaderIngressTo} {
						if v := h.Get(name); v != "" {
							t.Errorf("credential header %s reached the sandbox: %q", name, v)
						}
					}
					if got := h.Get("X-Forwarded-For"); got != "127.0.0.1" {
						t.Errorf("X-Forwarded-For = %q, want the client address only", got)
					}
					if got := h.Get("X-Forwarded-Proto"); got != "http" {
						t.Errorf("X-Forwarded-Proto = %q", got)
					}
					wantFwdHost := tc.host
					if wantFwdHost == "" {
						wantFwdHost = strings.TrimPrefix(g.srv.URL, "http://")
					}
					if got := h.Get("X-Forwarded-Host"); got != wantFwdHost {
						t.Errorf("X-Forwarded-Host = %q, want %q", got, wantFwdHost)
					}
					if got := h.Get("X-Forwarded-Prefix"); got != tc.wantPrefix {
						t.Errorf("X-Forwarded-Prefix = %q, want %q", got, tc.wantPrefix)
					}
					if e.Host != wantFwdHost {
						t.Errorf("target saw Host %q, want the client's %q", e.Host, wantFwdHost)
					}
					if h.Get("X-Custom") != "kept" {
						t.Errorf("end-to-end header X-Custom lost")
					}
					if k.network {
						if v := h.Get("X-Hop"); v != "" {
							t.Errorf("hop-by-hop header X-Hop reached the sandbox")
						}
						if v := resp.Header.Get("Proxy-Authenticate"); v != "" {
							t.Errorf("hop-by-hop reply header Proxy-Authenticate reached the client")
						}
					}
				})
			}
		})
	}
}

// TestProxyStreaming checks that events reach the client while the upstream
// is still running: the upstream sends its second event only after the test
// has read the first through the proxy. Server-sent events and any other
// streamed body (ndjson logs, chunked downloads) alike.
func TestProxyStreaming(t *testing.T) {
	for _, k := range targetKinds {
		for _, ct := range []string{"text/event-stream", "application/x-ndjson"} {
			t.Run(k.name+"/"+ct, func(t *testing.T) {
				up := newUpstream()
				t.Cleanup(up.releaseSSE)
				g := newGateway(t, k.make(t, up), nil)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				req, err := http.NewRequestWithContext(ctx, "GET", g.srv.URL+"/"+sbID+"/8080/sse?ct="+url.QueryEscape(ct), nil)
				if err != nil {
					t.Fatal(err)
				}
				resp, err := g.srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				if got := resp.Header.Get("Content-Type"); got != ct {
					t.Fatalf("Content-Type %q", got)
				}
				rd := bufio.NewReader(resp.Body)
				readEvent := func() string {
					t.Helper()
					line, err := rd.ReadString('\n')
					if err != nil {
						t.Fatalf("reading event: %v (the proxy buffered the stream)", err)
					}
					if blank, err := rd.ReadString('\n'); err != nil || blank != "\n" {
						t.Fatalf("event not terminated: %q %v", blank, err)
					}
					return line
				}
				if got := readEvent(); got != "data: one\n" {
					t.Fatalf("first event %q", got)
				}
				up.releaseSSE()
				if got := readEvent(); got != "data: two\n" {
					t.Fatalf("second event %q", got)
				}
			})
		}
	}
}

// TestProxyFullDuplex: the proxy still sends the request's body on after
// the upstream has begun its answer (duplextest says why that can fail).
func TestProxyFullDuplex(t *testing.T) {
	for _, k := range targetKinds {
		t.Run(k.name, func(t *testing.T) {
			g := newGateway(t, k.make(t, duplextest.Upstream()), nil)
			duplextest.Check(t, g.srv.Client(), g.srv.URL+"/"+sbID+"/8080/echo")
		})
	}
}

func TestProxyWebSocket(t *testing.T) {
	for _, k := range targetKinds {
		t.Run(k.name, func(t *testing.T) {
			g := newGateway(t, k.make(t, newUpstream()), nil)
			base := "ws" + strings.TrimPrefix(g.srv.URL, "http")
			tests := []struct {
				name, url string
				header    http.Header
			}{
				{name: "path", url: base + "/" + sbID + "/8080/ws"},
				{name: "header", url: base + "/ws", header: http.Header{ingress.HeaderIngressTo: {sbID + "-8080"}}},
				{name: "host", url: base + "/ws", header: http.Header{"Host": {sbID + "-8080." + domain}}},
			}
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					opts := &websocket.DialOptions{HTTPHeader: tc.header}
					if h := tc.header.Get("Host"); h != "" {
						opts.Host = h
					}
					c, resp, err := websocket.Dial(ctx, tc.url, opts)
					if err != nil {
						t.Fatalf("dial: %v", err)
					}
					defer c.CloseNow()
					if resp.StatusCode != http.StatusSwitchingProtocols {
						t.Fatalf("status %d", resp.StatusCode)
					}
					for i := range 3 {
						msg := "hello " + strconv.Itoa(i)
						if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
							t.Fatal(err)
						}
						typ, got, err := c.Read(ctx)
						if err != nil {
							t.Fatal(err)
						}
						if typ != websocket.MessageText || string(got) != "echo:/ws:"+msg {
							t.Fatalf("got %v %q", typ, got)
						}
					}
					big := []byte(strings.Repeat("b", 1<<20))
					if err := c.Write(ctx, websocket.MessageBinary, big); err != nil {
						t.Fatal(err)
					}
					c.SetReadLimit(2 << 20)
					if _, got, err := c.Read(ctx); err != nil || len(got) != len(big)+len("echo:/ws:") {
						t.Fatalf("binary echo: %d bytes, %v", len(got), err)
					}
					if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
						t.Fatalf("close: %v", err)
					}
				})
			}
		})
	}
}

// TestProxyUpstreamDown checks 502 answers that do not reveal where the
// sandbox port lives.
func TestProxyUpstreamDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	l.Close()
	sock := t.TempDir() + "/gone.sock"
	tests := []struct {
		name    string
		target  ingress.Target
		secrets []string
	}{
		{name: "tcp", target: ingress.Target{URL: &url.URL{Scheme: "http", Host: addr}}, secrets: []string{addr, port, "127.0.0.1"}},
		{name: "unix", target: ingress.Target{Dial: func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}, secrets: []string{sock, "gone.sock"}},
		{name: "transport", target: ingress.Target{
			URL:       &url.URL{Scheme: "http", Host: addr},
			Transport: ingress.NewTransport(nil),
		}, secrets: []string{addr, port}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := newGateway(t, tc.target, nil)
			for _, path := range []string{"/" + sbID + "/8080/x", "/" + sbID + "/8080/ws"} {
				resp, b := g.do(t, "GET", path, "", "")
				if resp.StatusCode != http.StatusBadGateway {
					t.Fatalf("status %d, body %s", resp.StatusCode, b)
				}
				if code, _ := errBody(t, b); code != ingress.CodeUnreachable {
					t.Errorf("code %q", code)
				}
				for _, s := range tc.secrets {
					if strings.Contains(string(b), s) {
						t.Errorf("502 body %s reveals %q", b, s)
					}
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(g.srv.URL, "http")+"/"+sbID+"/8080/ws", nil)
			if err == nil || resp == nil || resp.StatusCode != http.StatusBadGateway {
				t.Fatalf("websocket to a dead port: resp %v, err %v; want 502", resp, err)
			}
		})
	}
}

// TestProxyFunc uses Proxy directly, as the server's own proxy route does:
// the caller strips its prefix and passes the rest.
func TestProxyFunc(t *testing.T) {
	for _, k := range targetKinds {
		t.Run(k.name, func(t *testing.T) {
			target := k.make(t, newUpstream())
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/sandboxes/x/proxy/8080")
				if !ok {
					http.NotFound(w, r)
					return
				}
				ingress.Proxy(w, r, target, rest)
			}))
			defer srv.Close()
			resp, err := srv.Client().Get(srv.URL + "/sandboxes/x/proxy/8080/p%3Fq?a=b")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var b strings.Builder
			if _, err := bufio.NewReader(resp.Body).WriteTo(&b); err != nil {
				t.Fatal(err)
			}
			e := decodeEcho(t, []byte(b.String()))
			if e.Path != "/p?q" || e.Escaped != "/p%3Fq" || e.Query != "a=b" {
				t.Errorf("upstream saw %q (%q) ?%q", e.Path, e.Escaped, e.Query)
			}
			if got := e.Header.Get("X-Forwarded-Prefix"); got != "/sandboxes/x/proxy/8080" {
				t.Errorf("X-Forwarded-Prefix = %q", got)
			}
		})
	}
}

func TestProxyBadTargetURL(t *testing.T) {
	g := newGateway(t, ingress.Target{URL: &url.URL{Scheme: "ftp", Host: "10.1.2.3:21"}}, nil)
	resp, b := g.do(t, "GET", "/"+sbID+"/8080/", "", "")
	if resp.StatusCode != http.StatusInternalServerError || strings.Contains(string(b), "10.1.2.3") {
		t.Fatalf("status %d body %s; want a 500 that hides the address", resp.StatusCode, b)
	}
}

func TestProxyBasePath(t *testing.T) {
	u := serveTCP(t, newUpstream())
	for _, base := range []string{"/base", "/base/"} {
		t.Run(base, func(t *testing.T) {
			tu := *u
			tu.Path = base
			g := newGateway(t, ingress.Target{URL: &tu}, nil)
			resp, b := g.do(t, "GET", "/"+sbID+"/8080/a%2Fb", "", "")
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d body %s", resp.StatusCode, b)
			}
			if e := decodeEcho(t, b); e.Path != "/base/a/b" || e.Escaped != "/base/a%2Fb" {
				t.Errorf("upstream saw %q (%q)", e.Path, e.Escaped)
			}
		})
	}
}
