package wasm_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/runtimes/wasm"
	"github.com/hybox-dev/hybox/runtimes/wasm/wasmtest"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

// sink collects an execution's events.
type sink struct {
	mu  sync.Mutex
	evs []execd.Event
}

func (s *sink) Send(ev execd.Event) bool {
	s.mu.Lock()
	s.evs = append(s.evs, ev)
	s.mu.Unlock()
	return true
}

// text returns stdout, results and errors as one string.
func (s *sink) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, ev := range s.evs {
		switch ev.Type {
		case execd.EventStdout, execd.EventStderr:
			b.WriteString(ev.Text)
		case execd.EventResult:
			b.WriteString("=" + ev.Results["text"] + "\n")
		case execd.EventError:
			b.WriteString("!" + ev.Error.EName + ": " + ev.Error.EValue + "\n")
		}
	}
	return b.String()
}

func (s *sink) count() int {
	for _, ev := range s.evs {
		if ev.Type == execd.EventExecutionCount {
			return ev.ExecutionCount
		}
	}
	return 0
}

func setupState(t *testing.T) *wasm.Runtime {
	t.Helper()
	rt, stop, err := wasm.Setup(context.Background(), wasm.SetupOptions{Engine: wasmtest.Engine(t), ImageDir: filepath.Join(t.TempDir(), "images")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = stop() })
	return rt
}

// runCode runs code in the default context of lang.
func runCode(t *testing.T, sb runtimes.Sandbox, lang, code string) *sink {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var s sink
	require.NoError(t, sb.(runtimes.CodeRunner).RunCode(ctx, api.CodeRunRequest{Code: &code, Language: api.Language(lang)}, &s))
	return &s
}

func newStateSandbox(t *testing.T, rt *wasm.Runtime, ext map[string]string) (runtimes.Sandbox, runtimes.Spec) {
	t.Helper()
	spec := runtimes.Spec{ID: "s", Image: "wasm://default", Dir: t.TempDir(), Extensions: ext}
	require.NoError(t, rt.Validate(spec))
	sb, err := rt.Create(context.Background(), spec)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sb.Close(context.Background()) })
	return sb, spec
}

var stateCode = map[string][2]string{
	"python":     {"import string\nx = 41\nstring.capwords = lambda s: 'patched'", "x += 1\n(x, string.capwords('a b'))"},
	"javascript": {"var x = 41; Math.max = () => 'patched';", "x += 1; [x, Math.max(1, 2)].join(' ')"},
}

var stateWant = map[string]string{"python": "=(42, 'patched')\n", "javascript": "='42 patched'\n"}

// TestPauseFreesAndResumeRestores: pause writes the contexts out; after
// resume their variables, monkeypatches and execution counts are back.
func TestPauseFreesAndResumeRestores(t *testing.T) {
	rt := setupState(t)
	sb, spec := newStateSandbox(t, rt, nil)
	for lang, code := range stateCode {
		runCode(t, sb, lang, code[0])
	}
	require.NoError(t, sb.Pause(context.Background()))
	files, _ := filepath.Glob(filepath.Join(spec.Dir, "state", "*.state"))
	require.Len(t, files, 3, "two contexts and the manifest: %v", files)
	var s sink
	code := "1"
	require.ErrorIs(t, sb.(runtimes.CodeRunner).RunCode(context.Background(), api.CodeRunRequest{Code: &code}, &s), runtimes.ErrPaused)
	require.NoError(t, sb.Resume(context.Background()))
	for lang, code := range stateCode {
		got := runCode(t, sb, lang, code[1])
		require.Equal(t, stateWant[lang], got.text(), lang)
		require.Equal(t, 2, got.count(), lang)
	}
}

// TestStateSurvivesRestart: a sandbox closed (the server stopping) and
// restored by another backend on the same directories (the server started
// again) gets its contexts back on first use.
func TestStateSurvivesRestart(t *testing.T) {
	images := filepath.Join(t.TempDir(), "images")
	setup := func() *wasm.Runtime {
		rt, stop, err := wasm.Setup(context.Background(), wasm.SetupOptions{Engine: wasmtest.Engine(t), ImageDir: images})
		require.NoError(t, err)
		t.Cleanup(func() { _ = stop() })
		return rt
	}
	rt := setup()
	spec := runtimes.Spec{ID: "s", Image: "wasm://default", Dir: t.TempDir()}
	sb, err := rt.Create(context.Background(), spec)
	require.NoError(t, err)
	for lang, code := range stateCode {
		runCode(t, sb, lang, code[0])
	}
	require.NoError(t, sb.Close(context.Background()))

	rt2 := setup()
	sb2, err := rt2.Restore(context.Background(), spec)
	require.NoError(t, err)
	defer sb2.Close(context.Background())
	for lang, code := range stateCode {
		got := runCode(t, sb2, lang, code[1])
		require.Equal(t, stateWant[lang], got.text(), lang)
		require.Equal(t, 2, got.count(), lang)
	}
}

// TestCorruptedStateRefused: a damaged or truncated state file is refused
// with a clear error, and the context starts fresh; the sandbox lives on.
func TestCorruptedStateRefused(t *testing.T) {
	langs := []struct{ lang, set, fresh, want string }{
		{"python", "x = 41", "'x' in dir()", "=False\n"},
		{"javascript", "var x = 41", "typeof x", "='undefined'\n"},
	}
	for _, l := range langs {
		for _, damage := range []string{"corrupted", "truncated", "empty"} {
			t.Run(l.lang+"/"+damage, func(t *testing.T) {
				rt := setupState(t)
				sb, spec := newStateSandbox(t, rt, nil)
				runCode(t, sb, l.lang, l.set)
				require.NoError(t, sb.Pause(context.Background()))
				files, _ := filepath.Glob(filepath.Join(spec.Dir, "state", "*.state"))
				for _, f := range files {
					if filepath.Base(f) == "contexts.state" {
						continue
					}
					b, err := os.ReadFile(f)
					require.NoError(t, err)
					switch damage {
					case "corrupted":
						b[len(b)/2] ^= 0xff
					case "truncated":
						b = b[:len(b)/3]
					case "empty":
						b = nil
					}
					require.NoError(t, os.WriteFile(f, b, 0o644))
				}
				require.NoError(t, sb.Resume(context.Background()))
				got := runCode(t, sb, l.lang, "x")
				require.Contains(t, got.text(), "the saved state of this context was refused")
				require.Contains(t, got.text(), map[string]string{"corrupted": "checksum mismatch", "truncated": "truncated", "empty": "truncated"}[damage])
				got = runCode(t, sb, l.lang, l.fresh)
				require.Equal(t, l.want, got.text())
			})
		}
	}
}

// TestForkIndependent: a fork has the parent's variables and files; what
// either does afterwards is not seen by the other.
func TestForkIndependent(t *testing.T) {
	rt := setupState(t)
	sb, spec := newStateSandbox(t, rt, nil)
	runCode(t, sb, "python", "x = 1\nopen('/workspace/f', 'w').write('parent')")
	runCode(t, sb, "javascript", "var y = 1;")
	childSpec := spec
	childSpec.ID, childSpec.Dir = "child", t.TempDir()
	child, err := rt.Fork(context.Background(), sb, childSpec)
	require.NoError(t, err)
	defer child.Close(context.Background())

	require.Equal(t, "=(1, 'parent')\n", runCode(t, child, "python", "(x, open('/workspace/f').read())").text())
	runCode(t, child, "python", "x = 2\nopen('/workspace/f', 'w').write('child')")
	runCode(t, child, "javascript", "y = 2;")
	require.Equal(t, "=(1, 'parent')\n", runCode(t, sb, "python", "(x, open('/workspace/f').read())").text())
	require.Equal(t, "=1\n", runCode(t, sb, "javascript", "y").text())
	runCode(t, sb, "python", "x = 3")
	require.Equal(t, "=2\n", runCode(t, child, "python", "x").text())
	require.Equal(t, "=2\n", runCode(t, child, "javascript", "y").text())
	// The fork reseeded its random generator.
	a := runCode(t, sb, "python", "import random\nrandom.random()").text()
	b := runCode(t, child, "python", "import random\nrandom.random()").text()
	require.NotEqual(t, a, b)
}

// TestPerCallIsolation: with extensions["hybox.io/isolation"] each
// execution starts from a fresh interpreter; with per-call+workspace the
// files an execution wrote are gone for the next.
func TestPerCallIsolation(t *testing.T) {
	rt := setupState(t)
	sb, _ := newStateSandbox(t, rt, map[string]string{wasm.ExtensionIsolation: wasm.IsolationPerCall})
	runCode(t, sb, "python", "import json\nx = 1\njson.loads = None")
	require.Equal(t, "=(False, True)\n", runCode(t, sb, "python", "import json\n('x' in dir(), json.loads is not None)").text())
	runCode(t, sb, "javascript", "var y = 1; Math.max = null;")
	require.Equal(t, "='undefined function'\n", runCode(t, sb, "javascript", "typeof y + ' ' + typeof Math.max").text())
	runCode(t, sb, "python", "open('/workspace/kept', 'w').write('1')")
	require.Equal(t, "=True\n", runCode(t, sb, "python", "import os\nos.path.exists('/workspace/kept')").text())

	ws, spec := newStateSandbox(t, rt, map[string]string{wasm.ExtensionIsolation: wasm.IsolationPerCallWorkspace})
	require.NoError(t, os.WriteFile(filepath.Join(spec.Dir, "fs", "workspace", "input"), []byte("in"), 0o644))
	runCode(t, ws, "python", "open('/workspace/out', 'w').write('1')\nopen('/workspace/input', 'w').write('changed')")
	require.Equal(t, "=(False, 'in')\n", runCode(t, ws, "python", "import os\n(os.path.exists('/workspace/out'), open('/workspace/input').read())").text())

	bad := runtimes.Spec{ID: "b", Image: "wasm://default", Extensions: map[string]string{wasm.ExtensionIsolation: "sometimes"}}
	require.ErrorIs(t, rt.Validate(bad), runtimes.ErrInvalid)
}

// BenchmarkFork: Runtime.Fork of a sandbox whose Python context holds
// 50 MB of data and whose state is saved (no HTTP, no record).
func BenchmarkFork(b *testing.B) {
	rt, stop, err := wasm.Setup(context.Background(), wasm.SetupOptions{Engine: wasmtest.Engine(b), ImageDir: filepath.Join(b.TempDir(), "images")})
	require.NoError(b, err)
	b.Cleanup(func() { _ = stop() })
	spec := runtimes.Spec{ID: "s", Image: "wasm://default", Dir: b.TempDir()}
	sb, err := rt.Create(context.Background(), spec)
	require.NoError(b, err)
	defer sb.Close(context.Background())
	code := "data = b'x' * (50 << 20)"
	var s sink
	require.NoError(b, sb.(runtimes.CodeRunner).RunCode(context.Background(), api.CodeRunRequest{Code: &code}, &s))
	require.NoError(b, sb.Pause(context.Background())) // saved
	require.NoError(b, sb.Resume(context.Background()))
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cs := spec
		cs.ID, cs.Dir = "c", filepath.Join(b.TempDir(), "c")
		start := time.Now()
		c, err := rt.Fork(context.Background(), sb, cs)
		lat = append(lat, time.Since(start))
		require.NoError(b, err)
		b.StopTimer()
		_ = c.Close(context.Background())
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// TestCorruptedManifestRefused: a damaged list of contexts is refused;
// the sandbox is restored without its contexts and works.
func TestCorruptedManifestRefused(t *testing.T) {
	rt := setupState(t)
	spec := runtimes.Spec{ID: "m", Image: "wasm://default", Dir: t.TempDir()}
	sb, err := rt.Create(context.Background(), spec)
	require.NoError(t, err)
	runCode(t, sb, "python", "x = 1")
	require.NoError(t, sb.Close(context.Background()))
	mf := filepath.Join(spec.Dir, "state", "contexts.state")
	b, err := os.ReadFile(mf)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(mf, b[:len(b)-2], 0o644))
	sb2, err := rt.Restore(context.Background(), spec)
	require.NoError(t, err)
	defer sb2.Close(context.Background())
	require.Equal(t, "=False\n", runCode(t, sb2, "python", "'x' in dir()").text())
}

// TestPerCallContextsSurviveRestart: under per-call isolation a context
// keeps its id and execution count across a restart (its state is fresh
// anyway).
func TestPerCallContextsSurviveRestart(t *testing.T) {
	rt := setupState(t)
	spec := runtimes.Spec{ID: "i", Image: "wasm://default", Dir: t.TempDir(), Extensions: map[string]string{wasm.ExtensionIsolation: wasm.IsolationPerCall}}
	sb, err := rt.Create(context.Background(), spec)
	require.NoError(t, err)
	runCode(t, sb, "python", "x = 1")
	require.NoError(t, sb.Close(context.Background()))
	sb2, err := rt.Restore(context.Background(), spec)
	require.NoError(t, err)
	defer sb2.Close(context.Background())
	got := runCode(t, sb2, "python", "'x' in dir()")
	require.Equal(t, "=False\n", got.text())
	require.Equal(t, 2, got.count())
}
