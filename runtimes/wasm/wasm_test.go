package wasm_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/runtimes/runtimetest"
	"github.com/hybox-dev/hybox/runtimes/wasm"
	"github.com/hybox-dev/hybox/runtimes/wasm/internal/egresstest"
	"github.com/hybox-dev/hybox/runtimes/wasm/wasmtest"
)

func TestConformance(t *testing.T) {
	rt, stop, err := wasm.Setup(context.Background(), wasm.SetupOptions{Engine: wasmtest.Engine(t), PythonPool: 2, PythonReady: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop() })
	runtimetest.Run(t, runtimetest.Config{Runtime: rt, Image: "wasm://default"})
}

var _ runtimes.Egress = (*egresstest.Egress)(nil)

// recorder collects an execution's stdout.
type recorder struct{ bytes.Buffer }

func (r *recorder) Stdout(p []byte)          { r.Write(p) }
func (r *recorder) Stderr(p []byte)          { r.Write(p) }
func (r *recorder) Result(map[string]string) {}

// TestEgress checks that both guests reach the network only through the
// sandbox's Egress, from code contexts and from shell commands, and that a
// sandbox without one has no network.
func TestEgress(t *testing.T) {
	srv := egresstest.NewServer(t)
	ping := srv.URL + "/ping"
	rt, stop, err := wasm.Setup(context.Background(), wasm.SetupOptions{Engine: wasmtest.Engine(t), PythonPool: 1, PythonReady: 2})
	require.NoError(t, err)
	t.Cleanup(func() { _ = stop() })

	newSandbox := func(t *testing.T, eg runtimes.Egress, restore bool) runtimes.Sandbox {
		spec := runtimes.Spec{ID: "egress", Image: "wasm://default", Dir: t.TempDir(), Egress: eg}
		sb, err := rt.Create(context.Background(), spec)
		require.NoError(t, err)
		if restore {
			require.NoError(t, sb.Close(context.Background()))
			sb, err = rt.Restore(context.Background(), spec)
			require.NoError(t, err)
		}
		t.Cleanup(func() { _ = sb.Close(context.Background()) })
		require.NoError(t, os.WriteFile(filepath.Join(spec.Dir, "fs", "workspace", "get.py"),
			[]byte("import sys, urllib.request\nprint(urllib.request.urlopen(sys.argv[1]).read().decode())\n"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(spec.Dir, "fs", "workspace", "get.js"),
			[]byte("fetch(process.argv[2]).then((r) => r.text()).then(console.log, (e) => console.log(e.message))\n"), 0o644))
		return sb
	}
	code := map[string]string{
		"python":     "import urllib.request\ntry:\n    print(urllib.request.urlopen(URL).read().decode())\nexcept Exception as e:\n    print(e.reason)",
		"javascript": "console.log(await fetch(URL).then((r) => r.text(), (e) => e.message))",
	}
	eg := srv.Egress()
	for _, c := range []struct {
		name    string
		eg      runtimes.Egress
		restore bool
		url     string
		want    string
		cmds    bool // also run shell commands (each starts a fresh guest)
	}{
		{"allowed", eg, false, ping, "pong", true},
		{"restored", eg, true, ping, "pong", false},
		{"denied", eg, false, "http://denied.test/", egresstest.DeniedMessage, false},
		{"no egress", nil, false, ping, "this sandbox has no network access", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			sb := newSandbox(t, c.eg, c.restore)
			be := sb.(execd.Executor)
			for _, lang := range []string{"python", "javascript"} {
				it, err := be.NewInterpreter(context.Background(), lang, "")
				require.NoError(t, err)
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				var rec recorder
				src := "URL = '" + c.url + "'\n" + code[lang]
				if lang == "javascript" {
					src = "var URL = '" + c.url + "';\n" + code[lang]
				}
				xerr, err := it.Run(ctx, src, &rec)
				cancel()
				_ = it.Close()
				require.NoError(t, err)
				require.Nil(t, xerr, "%s: %+v", lang, xerr)
				assert.Equal(t, c.want+"\n", rec.String(), lang)
			}
			if !c.cmds {
				return
			}
			for _, cmd := range []string{"python3 get.py " + c.url, "node get.js " + c.url, "curl -sS " + c.url, "wget -O- " + c.url} {
				var out bytes.Buffer
				p, err := be.StartCommand(context.Background(), execd.ProcessSpec{Command: cmd, Stdout: &out, Stderr: &out})
				require.NoError(t, err)
				_, err = p.Wait()
				require.NoError(t, err)
				assert.Contains(t, out.String(), c.want, cmd)
			}
		})
	}
}
