package jsguest

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
	"github.com/hybox-dev/hybox/runtimes/wasm/internal/egresstest"
)

func newNetInterp(t *testing.T, m *Manager, eg engine.Egress) execd.Interpreter {
	t.Helper()
	it, err := m.NewInterpreter(context.Background(), nil, "/", 0, eg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = it.Close() })
	return it
}

func TestFetch(t *testing.T) {
	m := newManager(t, Options{})
	ts := egresstest.NewServer(t)
	eg := ts.Egress()
	it := newNetInterp(t, m, eg)
	run(t, it, "const base = "+jsQuote(ts.URL))

	cases := []struct {
		name, code, want string
	}{
		{"get text and headers", `const r = await fetch(base + '/text', { headers: { 'X-Custom': 'v1' } });
			[r.status, r.statusText, r.ok, r.headers.get('x-reply'), r.headers.has('X-REPLY'), r.redirected, await r.text()].join('|')`,
			"'200|OK|true|yes|true|false|hello v1'"},
		{"headers class and pairs", `const h = new Headers([['X-Custom', 'a']]); h.append('x-custom', 'b');
			const r = await fetch(new Request(base + '/text', { headers: h })); await r.text()`, "'hello a, b'"},
		{"post json", `const r = await fetch(base + '/echo', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ a: [1, 2] }) });
			const j = await r.json(); [r.headers.get('x-method'), r.headers.get('x-content-type'), j.a[1]].join('|')`,
			"'POST|application/json|2'"},
		{"binary round trip", `const sent = new Uint8Array(70000); for (let i = 0; i < sent.length; i++) sent[i] = (i * 7 + 3) & 255;
			const r = await fetch(base + '/echo', { method: 'PUT', body: sent.subarray(0, 65536) });
			const got = await r.bytes(); let same = got.length === 65536; for (let i = 0; same && i < got.length; i++) same = got[i] === sent[i];
			[same, r.headers.get('content-type'), (await fetch(base + '/echo', { method: 'POST', body: sent.buffer }).then((x) => x.arrayBuffer())).byteLength].join('|')`,
			"'true|application/octet-stream|70000'"},
		{"form body", `const r = await fetch(base + '/echo', { method: 'POST', body: new URLSearchParams({ q: 'a b&c', n: 'é' }) });
			[r.headers.get('x-content-type'), await r.text()].join('|')`,
			"'application/x-www-form-urlencoded;charset=UTF-8|q=a+b%26c&n=%C3%A9'"},
		{"404 is not an error", `const r = await fetch(base + '/missing'); [r.status, r.ok, (await r.text()).trim()].join('|')`, "'404|false|nope'"},
		{"redirect followed", `const r = await fetch(base + '/redirect'); [r.status, r.redirected, r.url.endsWith('/text'), await r.text()].join('|')`, "'200|true|true|hello '"},
		{"redirect manual", `const r = await fetch(base + '/redirect', { redirect: 'manual' }); [r.status, r.headers.get('location')].join('|')`, "'302|/text'"},
		{"redirect error", `await fetch(base + '/redirect', { redirect: 'error' }).then(() => 'resolved', (e) => e.name)`, "'TypeError'"},
		{"denied host", `await fetch('http://denied.test/x').then(() => 'resolved', (e) => (e instanceof TypeError) + ' ' + e.message)`,
			"'true " + egresstest.DeniedMessage + "'"},
		{"body used twice", `const r = await fetch(base + '/text'); await r.text(); await r.text().then(() => 'again', (e) => e.message)`, "'Body is unusable: Body has already been read'"},
		{"bad url", `await fetch('/relative').then(() => 'resolved', (e) => e.name)`, "'TypeError'"},
		{"response constructor", `const r = new Response('{"x":1}', { status: 201, headers: { 'content-type': 'application/json' } }); [r.status, r.ok, (await r.json()).x].join('|')`, "'201|true|1'"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec, ee := run(t, it, "{ "+c.code+" }")
			require.Nil(t, ee, "%+v", ee)
			assert.Equal(t, c.want, rec.result())
		})
	}
	t.Run("server got the exact bytes", func(t *testing.T) {
		rec, ee := run(t, it, `{ const b = new Uint8Array(256); for (let i = 0; i < 256; i++) b[i] = 255 - i;
			const r = await fetch(base + '/echo', { method: 'POST', body: b }); (await r.bytes()).length }`)
		require.Nil(t, ee)
		assert.Equal(t, "256", rec.result())
		want := make([]byte, 256)
		for i := range want {
			want[i] = byte(255 - i)
		}
		assert.Equal(t, want, ts.LastBody())
	})
}

func TestFetchNoNetwork(t *testing.T) {
	m := newManager(t, Options{})
	it := newNetInterp(t, m, nil)
	rec, ee := run(t, it, `await fetch('http://127.0.0.1:1/').then(() => 'resolved', (e) => e.name + ': ' + e.message)`)
	require.Nil(t, ee)
	assert.Equal(t, "'TypeError: this sandbox has no network access'", rec.result())
}

func TestFetchTimeoutCancelsRequest(t *testing.T) {
	m := newManager(t, Options{})
	ts := egresstest.NewServer(t)
	eg := ts.Egress()
	it := newNetInterp(t, m, eg)
	ctx := ts.CancelOnArrival(t, execd.ErrTimeout)
	start := time.Now()
	_, err := it.Run(ctx, "await fetch("+jsQuote(ts.URL+"/hang")+")", &recorder{})
	require.ErrorIs(t, err, execd.ErrTimeout)
	assert.Less(t, time.Since(start), 10*time.Second)
	select {
	case <-ts.Hung():
	case <-time.After(5 * time.Second):
		t.Fatal("the server never saw the request cancelled")
	}
	// The context survives.
	rec, ee := run(t, it, "const r = await fetch("+jsQuote(ts.URL+"/text")+"); await r.text()")
	require.Nil(t, ee)
	assert.Equal(t, "'hello '", rec.result())
}

func TestFetchCommand(t *testing.T) {
	m := newManager(t, Options{})
	ts := egresstest.NewServer(t)
	eg := ts.Egress()
	root, err := openTempRoot(t)
	require.NoError(t, err)
	script := "fetch(process.argv[2]).then((r) => r.text()).then((t) => console.log(t), (e) => { console.error(e.message); process.exitCode = 3; });\n"
	require.NoError(t, root.WriteFile("script.js", []byte(script), 0o644))

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
			var out bytes.Buffer
			code, err := m.RunCommand(context.Background(), engine.Command{Args: []string{"node", "script.js", c.url},
				Stdout: &out, Stderr: &out, Root: root, Cwd: "/", Egress: c.eg})
			require.NoError(t, err)
			assert.Equal(t, c.code, code)
			assert.Equal(t, c.out, out.String())
		})
	}
	t.Run("timeout", func(t *testing.T) {
		ctx := ts.CancelOnArrival(t, execd.ErrTimeout)
		var out bytes.Buffer
		code, err := m.RunCommand(ctx, engine.Command{Args: []string{"node", "script.js", ts.URL + "/hang"},
			Stdout: &out, Stderr: &out, Root: root, Cwd: "/", Egress: eg})
		require.ErrorIs(t, err, execd.ErrTimeout)
		assert.Equal(t, exitKilled, code)
	})
}

func openTempRoot(t *testing.T) (*os.Root, error) {
	root, err := os.OpenRoot(t.TempDir())
	if err == nil {
		t.Cleanup(func() { _ = root.Close() })
	}
	return root, err
}

// jsQuote returns s as a JavaScript string literal.
func jsQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`).Replace(s) + "'"
}
