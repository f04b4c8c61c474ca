package pyguest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
	"github.com/hybox-dev/hybox/runtimes/wasm/internal/egresstest"
)

// newNetInterp returns an interpreter with root at / that reaches the
// network through eg.
func newNetInterp(t *testing.T, m *Manager, root *os.Root, eg engine.Egress) execd.Interpreter {
	t.Helper()
	it, err := m.NewInterpreter(context.Background(), root, "/", 0, eg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = it.Close() })
	return it
}

func TestHTTPInterpreter(t *testing.T) {
	m := newManager(t, Options{PoolSize: 1})
	ts := egresstest.NewServer(t)
	eg := ts.Egress()
	root, dir := newRoot(t)
	it := newNetInterp(t, m, root, eg)
	_, xerr := run(t, it, "import hybox_http, urllib.request, urllib.error, json, hashlib\nbase = "+pyQuote(ts.URL))
	require.Nil(t, xerr)

	blob := bytes.Repeat([]byte{0, 1, 2, 255, 254, '\r', '\n', 0x80}, 40000)
	sum := sha256.Sum256(blob)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "blob.bin"), blob, 0o644))

	cases := []struct{ name, code, want string }{
		{"get text and headers", `r = hybox_http.urlopen(base + "/text", headers={"X-Custom": "v1"})
with r:
    print(r.status, r.reason, r.headers["x-reply"], r.headers.get("X-Reply"), r.url == base + "/text", r.read().decode())`,
			"200 OK yes yes True hello v1\n"},
		{"post json", `r = hybox_http.urlopen(base + "/json", data=json.dumps({"a": [1, 2]}).encode(), headers={"Content-Type": "application/json"})
j = r.json()
print(j["got"]["a"], j["ua"])`, "[1, 2] Python-urllib/3.12\n"},
		{"binary round trip", `data = open("/blob.bin", "rb").read()
r = hybox_http.urlopen(base + "/echo", data=data, method="PUT")
body = r.read()
print(body == data, r.headers["X-Method"], r.headers["Content-Type"], hashlib.sha256(body).hexdigest())`,
			"True PUT application/octet-stream " + hex.EncodeToString(sum[:]) + "\n"},
		{"404 raises HTTPError", `try:
    hybox_http.urlopen(base + "/missing")
except urllib.error.HTTPError as e:
    print(e.code, e.reason, e.read().decode().strip(), e.headers["Content-Type"])`, "404 Not Found nope text/plain; charset=utf-8\n"},
		{"denied raises URLError", `try:
    hybox_http.urlopen("http://denied.test/x")
except urllib.error.URLError as e:
    print(type(e).__name__, e.reason)`, "URLError " + egresstest.DeniedMessage + "\n"},
		{"redirect followed", `r = hybox_http.urlopen(base + "/redirect")
print(r.status, r.redirected, r.url.endswith("/text"), r.read())`, "200 True True b'hello '\n"},
		{"urllib urlopen", `req = urllib.request.Request(base + "/echo", data=b"\x00\xffraw", headers={"X-Custom": "x"}, method="POST")
with urllib.request.urlopen(req, timeout=10) as r:
    print(r.status, r.reason, r.headers["X-Method"], r.headers["X-Content-Type"], r.read())`,
			"200 OK POST application/x-www-form-urlencoded b'\\x00\\xffraw'\n"},
		{"urllib redirect and https opener", `r = urllib.request.urlopen(base + "/redirect")
print(r.status, r.geturl().endswith("/text"), r.read(), "https" in urllib.request.build_opener().handle_open)`,
			"200 True b'hello ' True\n"},
		{"urllib 404 and denial", `try:
    urllib.request.urlopen(base + "/missing")
except urllib.error.HTTPError as e:
    print(e.code, e.read().strip())
try:
    urllib.request.urlopen("https://denied.test/")
except urllib.error.URLError as e:
    print(e.reason)`, "404 b'nope'\n" + egresstest.DeniedMessage + "\n"},
		{"http.client get, keep-alive and 404", `import http.client, urllib.parse
hp = urllib.parse.urlsplit(base)
c = http.client.HTTPConnection(hp.hostname, hp.port, timeout=10)
c.request("GET", "/text", headers={"X-Custom": "v1"})
r = c.getresponse()
print(r.status, r.reason, r.getheader("X-Reply"), r.read().decode())
c.request("GET", "/missing")
r = c.getresponse()
print(r.status, r.read().strip())
c.close()`, "200 OK yes hello v1\n404 b'nope'\n"},
		{"http.client bodies: sized, chunked, file", `import http.client, io, urllib.parse
hp = urllib.parse.urlsplit(base)
c = http.client.HTTPConnection(hp.hostname, hp.port)
c.request("POST", "/echo", body=b"\x00sized\xff", headers={"Content-Type": "application/x-raw"})
r = c.getresponse()
print(r.getheader("X-Method"), r.getheader("X-Content-Type"), r.read())
c.request("PUT", "/echo", body=iter([b"chu", b"nked"]), encode_chunked=True)
print(c.getresponse().read())
c.request("POST", "/echo", body=io.BytesIO(b"from a file"))
print(c.getresponse().read())`, "POST application/x-raw b'\\x00sized\\xff'\nb'chunked'\nb'from a file'\n"},
		{"http.client: redirects returned, HEAD, denial", `import http.client, urllib.parse
hp = urllib.parse.urlsplit(base)
c = http.client.HTTPConnection(hp.hostname, hp.port)
c.request("GET", "/redirect")
r = c.getresponse()
print(r.status, r.getheader("Location"), r.read() is not None)
c.request("HEAD", "/text")
r = c.getresponse()
print(r.status, r.getheader("Content-Length"), r.read())
try:
    d = http.client.HTTPSConnection("denied.test", context=None)
    d.request("GET", "/")
    d.getresponse()
except OSError as e:
    print(type(e).__name__, e.reason if hasattr(e, "reason") else e)
c.request("GET", "/ping")
print(c.getresponse().read())
t = http.client.HTTPConnection("proxy.test", 3128)
t.set_tunnel("x.test")
try:
    t.request("GET", "/")
except OSError as e:
    print(e)`, "302 /text True\n200 6 b''\nURLError " + egresstest.DeniedMessage + "\nb'pong'\nHTTP tunnels (set_tunnel) are not supported in a hybox sandbox\n"},
		{"request timeout", `try:
    hybox_http.urlopen(base + "/hang", timeout=0.2)
except urllib.error.URLError as e:
    print(type(e.reason).__name__, e.reason)`, "TimeoutError timed out\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec, xerr := run(t, it, c.code)
			stdout, stderr, _ := rec.out()
			require.Nil(t, xerr, "%+v\n%s", xerr, stderr)
			assert.Equal(t, c.want, stdout)
		})
	}
	t.Run("server got the exact bytes", func(t *testing.T) {
		_, xerr := run(t, it, `hybox_http.urlopen(base + "/echo", data=bytes(range(256))[::-1])`)
		require.Nil(t, xerr)
		want := make([]byte, 256)
		for i := range want {
			want[i] = byte(255 - i)
		}
		assert.Equal(t, want, ts.LastBody())
	})
}

func TestHTTPNoNetwork(t *testing.T) {
	m := newManager(t, Options{PoolSize: 1})
	root, _ := newRoot(t)
	it := newInterp(t, m, root, "/", 0)
	rec, xerr := run(t, it, `import urllib.request, urllib.error
try:
    urllib.request.urlopen("http://127.0.0.1:1/")
except urllib.error.URLError as e:
    print(e.reason)`)
	require.Nil(t, xerr)
	stdout, _, _ := rec.out()
	assert.Equal(t, "this sandbox has no network access\n", stdout)
}

func TestHTTPRunTimeoutCancelsRequest(t *testing.T) {
	m := newManager(t, Options{PoolSize: 1})
	ts := egresstest.NewServer(t)
	eg := ts.Egress()
	root, _ := newRoot(t)
	it := newNetInterp(t, m, root, eg)
	ctx := ts.CancelOnArrival(t, execd.ErrTimeout)
	start := time.Now()
	_, err := it.Run(ctx, "import hybox_http\nhybox_http.urlopen("+pyQuote(ts.URL+"/hang")+")", newRecorder())
	require.ErrorIs(t, err, execd.ErrTimeout)
	assert.Less(t, time.Since(start), 15*time.Second)
	select {
	case <-ts.Hung():
	case <-time.After(5 * time.Second):
		t.Fatal("the server never saw the request cancelled")
	}
	// The context restarts with a fresh guest that still has the network.
	rec, xerr := run(t, it, "import hybox_http\nprint(hybox_http.urlopen("+pyQuote(ts.URL+"/text")+").read())")
	require.Nil(t, xerr)
	stdout, _, _ := rec.out()
	assert.Equal(t, "b'hello '\n", stdout)
}

func TestHTTPCommand(t *testing.T) {
	m := newManager(t, Options{PoolSize: -1})
	ts := egresstest.NewServer(t)
	eg := ts.Egress()
	root, dir := newRoot(t)
	script := `import sys, urllib.request, urllib.error
try:
    print(urllib.request.urlopen(sys.argv[1]).read().decode())
except urllib.error.URLError as e:
    print(e.reason)
    sys.exit(3)
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "script.py"), []byte(script), 0o644))
	for _, c := range []struct {
		name, url, out string
		eg             engine.Egress
		code           int
	}{
		{"ok", ts.URL + "/text", "hello \n", eg, 0},
		{"denied", "http://denied.test/", egresstest.DeniedMessage + "\n", eg, 3},
		{"no network", ts.URL + "/text", "this sandbox has no network access\n", nil, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			code, err := m.RunCommand(ctx, engine.Command{Args: []string{"python3", "script.py", c.url},
				Stdout: &stdout, Stderr: &stderr, Root: root, Cwd: "/", Egress: c.eg})
			require.NoError(t, err)
			assert.Equal(t, c.code, code, stderr.String())
			assert.Equal(t, c.out, stdout.String())
		})
	}
	t.Run("timeout", func(t *testing.T) {
		ctx := ts.CancelOnArrival(t, execd.ErrTimeout)
		var out bytes.Buffer
		code, err := m.RunCommand(ctx, engine.Command{Args: []string{"python3", "script.py", ts.URL + "/hang"},
			Stdout: &out, Stderr: &out, Root: root, Cwd: "/", Egress: eg})
		require.ErrorIs(t, err, execd.ErrTimeout)
		assert.Equal(t, exitKilled, code)
	})
}

func TestServeHTTPMalformed(t *testing.T) {
	eg := egresstest.NewServer(t).Egress()
	for _, c := range []struct {
		name  string
		frame []byte
		want  string
	}{
		{"empty", nil, "shorter than its header"},
		{"bad magic", appendFrame(nil, "XXXX", []byte(`{}`), nil), "bad magic"},
		{"truncated", appendFrame(nil, requestMagic, []byte(`{"url":"http://x/"}`), []byte("body"))[:30], "want"},
		{"bad json", appendFrame(nil, requestMagic, []byte(`{`), nil), "bad request head"},
		{"bad url", appendFrame(nil, requestMagic, []byte(`{"url":"file:///etc/passwd"}`), nil), "only absolute http and https"},
	} {
		t.Run(c.name, func(t *testing.T) {
			head, body, err := parseFrame(serveHTTP(context.Background(), eg, c.frame), responseMagic)
			require.NoError(t, err)
			assert.Empty(t, body)
			var e responseError
			require.NoError(t, json.Unmarshal(head, &e))
			assert.Contains(t, e.Error, c.want)
		})
	}
}

func FuzzParseFrame(f *testing.F) {
	f.Add(appendFrame(nil, requestMagic, []byte(`{"url":"http://a/"}`), []byte{0, 1, 2}))
	f.Add(appendFrame(nil, requestMagic, nil, nil))
	f.Add([]byte("HBQ1\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		head, body, err := parseFrame(b, requestMagic)
		if err != nil {
			return
		}
		if got := appendFrame(nil, requestMagic, head, body); !bytes.Equal(got, b) {
			t.Fatalf("re-encoded frame differs: %q vs %q", got, b)
		}
	})
}

// pyQuote returns s as a Python string literal.
func pyQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
