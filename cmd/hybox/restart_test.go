package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/runtimes/oci/ocitest"
	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
	"github.com/hybox-dev/hybox/runtimes/wasm/wasmtest"
)

// buildHybox compiles the real binary once per test.
func buildHybox(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "hybox")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Run())
	return bin
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

type proc struct {
	cmd *exec.Cmd
	log *lockedBuffer
}

// lockedBuffer is a bytes.Buffer safe for the child's output copier and
// the test reading it at once.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func startServe(t *testing.T, bin, addr, dataDir string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"serve", "--addr", addr, "--data-dir", dataDir, "--api-key", "k", "--guest-dir", wasmtest.GuestDir(t)}, extra...)
	cmd := exec.Command(bin, args...)
	log := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	p := &proc{cmd: cmd, log: log}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + addr + "/health"); err == nil {
			resp.Body.Close()
			return p
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("hybox did not come up: %s", log.String())
	return nil
}

func call(t *testing.T, method, url, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("OPEN-SANDBOX-API-KEY", "k")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestKill9Restart kills the real server with SIGKILL and checks that a new
// one serves the same sandboxes with their metadata, expiry and files.
func TestKill9Restart(t *testing.T) {
	bin := buildHybox(t)
	addr, data := freeAddr(t), t.TempDir()
	p := startServe(t, bin, addr, data)
	base := "http://" + addr + "/v1"

	st, b := call(t, "POST", base+"/sandboxes", `{"image":{"uri":"wasm://default"},"timeout":3600,"metadata":{"owner":"kill9"}}`)
	require.Equal(t, 202, st, string(b))
	var sb struct {
		ID        string            `json:"id"`
		ExpiresAt time.Time         `json:"expiresAt"`
		Metadata  map[string]string `json:"metadata"`
	}
	require.NoError(t, json.Unmarshal(b, &sb))
	st, b = call(t, "POST", base+"/sandboxes/"+sb.ID+"/proxy/44772/command", `{"command":"echo survived > /workspace/f.txt"}`)
	require.Equal(t, 200, st, string(b))
	require.Contains(t, string(b), "execution_complete")
	st, b = call(t, "POST", base+"/sandboxes/"+sb.ID+"/proxy/44772/code", `{"context":{"language":"python"},"code":"import string\nx = 'variable survived'"}`)
	require.Equal(t, 200, st, string(b))
	require.Contains(t, string(b), "execution_complete")
	// The context is saved a moment after its execution: wait for it.
	manifest := filepath.Join(data, "sandboxes", sb.ID, "state", "contexts.state")
	require.Eventually(t, func() bool {
		st, err := engine.ReadStateFile(manifest)
		return err == nil && strings.Contains(string(st.Host), `"count":1`) && strings.Contains(string(st.Host), `"key"`)
	}, 30*time.Second, 20*time.Millisecond)

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	_, _ = p.cmd.Process.Wait()

	startServe(t, bin, addr, data)
	st, b = call(t, "GET", base+"/sandboxes?metadata=owner%3Dkill9", "")
	require.Equal(t, 200, st)
	var list struct {
		Items []struct {
			ID        string            `json:"id"`
			ExpiresAt time.Time         `json:"expiresAt"`
			Metadata  map[string]string `json:"metadata"`
			Status    struct{ State string }
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal(b, &list))
	require.Len(t, list.Items, 1)
	got := list.Items[0]
	assert.Equal(t, sb.ID, got.ID)
	assert.True(t, got.ExpiresAt.Equal(sb.ExpiresAt))
	assert.Equal(t, map[string]string{"owner": "kill9"}, got.Metadata)
	assert.Equal(t, "Running", got.Status.State)
	st, b = call(t, "GET", base+"/sandboxes/"+sb.ID+"/proxy/44772/files/download?path=/workspace/f.txt", "")
	require.Equal(t, 200, st, string(b))
	assert.Equal(t, "survived\n", string(b))
	// The Python context is back on first use, with its variables and
	// its execution count.
	st, b = call(t, "POST", base+"/sandboxes/"+sb.ID+"/proxy/44772/code", `{"context":{"language":"python"},"code":"(x, 'string' in dir())"}`)
	require.Equal(t, 200, st, string(b))
	assert.Contains(t, string(b), `"text":"('variable survived', True)"`)
	assert.Contains(t, string(b), `"execution_count":2`)
}

func TestServeRefusesWithoutKey(t *testing.T) {
	bin := buildHybox(t)
	cmd := exec.Command(bin, "serve", "--addr", freeAddr(t), "--data-dir", t.TempDir())
	cmd.Env = append(os.Environ(), "HYBOX_API_KEY=", "HYBOX_INSECURE=")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "serve must refuse to start without a key")
	assert.Contains(t, string(out), "API key")
}

func TestLoadConfigPrecedence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hybox.toml")
	require.NoError(t, os.WriteFile(path, []byte("addr = \"127.0.0.1:9\"\ndata_dir = \"/from/file\"\n[wasm]\npython_pool = 5\n"), 0o600))
	env := map[string]string{"HYBOX_DATA_DIR": "/from/env"}
	c, err := loadConfig(path, func(k string) string { return env[k] })
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:9", c.Addr, "file overrides defaults")
	assert.Equal(t, "/from/env", c.DataDir, "env overrides file")
	assert.Equal(t, 5, c.Wasm.PythonPool)
	assert.Equal(t, "512Mi", c.Wasm.DefaultMemory, "embedded default kept")

	require.NoError(t, os.WriteFile(path, []byte("adr = \"typo\"\n"), 0o600))
	_, err = loadConfig(path, func(string) string { return "" })
	require.ErrorContains(t, err, "unknown keys: adr")

	_, err = loadConfig("", func(k string) string {
		if k == "HYBOX_INSECURE" {
			return "maybe"
		}
		return ""
	})
	require.ErrorContains(t, err, "HYBOX_INSECURE")
}

// allowed_host_paths is one setting for every tier; the old [oci] spelling
// is still read and added to it; HYBOX_ALLOWED_HOST_PATHS replaces the
// top-level list.
func TestLoadConfigAllowedHostPaths(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hybox.toml")
	require.NoError(t, os.WriteFile(path, []byte("allowed_host_paths = [\"/srv/a\"]\n[oci]\nallowed_host_paths = [\"/srv/old\"]\n"), 0o600))
	c, err := loadConfig(path, func(string) string { return "" })
	require.NoError(t, err)
	assert.Equal(t, []string{"/srv/a", "/srv/old"}, c.AllowedHostPaths)
	c, err = loadConfig(path, func(k string) string {
		return map[string]string{"HYBOX_ALLOWED_HOST_PATHS": "/env/a,/env/b"}[k]
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"/env/a", "/env/b", "/srv/old"}, c.AllowedHostPaths)
}

// TestKill9RestartContainers: containers keep running under containerd's
// shims when the server is killed, and a new server re-attaches them, under
// runc and under gVisor.
func TestKill9RestartContainers(t *testing.T) {
	const ns = "hybox-test-restart"
	sock := ocitest.Containerd(t)
	ocitest.ImageIn(t, sock, ns)
	g := ocitest.GVisor(t)
	if g.Dir == "" {
		t.Fatalf("no gVisor build: %v", g.Err)
	}
	bin := buildHybox(t)
	addr, data := freeAddr(t), t.TempDir()
	cfg := filepath.Join(t.TempDir(), "hybox.toml")
	require.NoError(t, os.WriteFile(cfg, []byte("[oci]\nnamespace = \""+ns+"\"\nrunsc_platform = \""+g.Platform+"\"\n"), 0o600))
	flags := []string{"--config", cfg, "--containerd", sock, "--execd-binary", ocitest.ExecdBinary(t), "--runsc-binary", g.Runsc()}
	p := startServe(t, bin, addr, data, flags...)
	base := "http://" + addr + "/v1"

	ids := map[string]string{} // runtime → sandbox id
	for _, runtime := range []string{"runc", "runsc"} {
		st, b := call(t, "POST", base+"/sandboxes", `{"image":{"uri":"`+ocitest.ImageName+`"},"extensions":{"hybox.io/runtime":"`+runtime+`"},"entrypoint":["sleep","infinity"],"timeout":600}`)
		require.Equal(t, 202, st, string(b)+p.log.String())
		var sb struct{ ID string }
		require.NoError(t, json.Unmarshal(b, &sb))
		ids[runtime] = sb.ID
		t.Cleanup(func() { // best effort, should the test fail before its own delete
			req, _ := http.NewRequest("DELETE", base+"/sandboxes/"+sb.ID, nil)
			req.Header.Set("OPEN-SANDBOX-API-KEY", "k")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		})
		st, b = call(t, "POST", base+"/sandboxes/"+sb.ID+"/proxy/44772/command", `{"command":"echo survived > /tmp/f.txt; sleep 1000 &"}`)
		require.Equal(t, 200, st, string(b))
	}

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	_, _ = p.cmd.Process.Wait()

	p2 := startServe(t, bin, addr, data, flags...)
	for runtime, id := range ids {
		st, b := call(t, "POST", base+"/sandboxes/"+id+"/proxy/44772/command", `{"command":"cat /tmp/f.txt; pgrep -c sleep"}`)
		require.Equal(t, 200, st, runtime+": "+string(b)+p2.log.String())
		assert.Contains(t, string(b), `"text":"survived"`, runtime)
		assert.Contains(t, string(b), `"text":"2"`, "%s: the entrypoint and the background sleep still run", runtime)
		st, _ = call(t, "DELETE", base+"/sandboxes/"+id, "")
		assert.Equal(t, 204, st, runtime)
	}
}

// TestKill9MidClaim kills the server between personalising a pool member
// and answering the create: after a restart nothing half-made is left (no
// sandbox, the claimed member destroyed), the pool refills, and a server
// whose configuration drops the pool removes its members.
func TestKill9MidClaim(t *testing.T) {
	const ns = "hybox-test-crash"
	sock := ocitest.Containerd(t)
	ocitest.ImageIn(t, sock, ns)
	client := ocitest.Client(t, sock, ns)
	containers := func() []string {
		cs, err := client.Containers(context.Background())
		require.NoError(t, err)
		var ids []string
		for _, c := range cs {
			ids = append(ids, c.ID())
		}
		return ids
	}
	bin := buildHybox(t)
	addr, data := freeAddr(t), t.TempDir()
	dir := t.TempDir()
	withPool := filepath.Join(dir, "pool.toml")
	require.NoError(t, os.WriteFile(withPool, []byte("[oci]\nnamespace = \""+ns+"\"\n\n[[pools]]\nname = \"crash\"\nimage = \""+ocitest.ImageName+"\"\nruntime = \"runc\"\nsize = 1\n"), 0o600))
	noPool := filepath.Join(dir, "nopool.toml")
	require.NoError(t, os.WriteFile(noPool, []byte("[oci]\nnamespace = \""+ns+"\"\n"), 0o600))
	flags := func(cfg string) []string {
		return []string{"--config", cfg, "--containerd", sock, "--execd-binary", ocitest.ExecdBinary(t)}
	}
	base := "http://" + addr + "/v1"
	waitIdle := func(p *proc) {
		t.Helper()
		require.Eventually(t, func() bool {
			st, b := call(t, "GET", base+"/pools/crash", "")
			var pool struct {
				Status struct{ Available, Starting int }
			}
			return st == 200 && json.Unmarshal(b, &pool) == nil && pool.Status.Available == 1 && pool.Status.Starting == 0
		}, 60*time.Second, 50*time.Millisecond, "the pool never filled: %s", p.log.String())
	}

	t.Setenv("HYBOX_TEST_FAILPOINT", "pool-claimed")
	p := startServe(t, bin, addr, data, flags(withPool)...)
	waitIdle(p)
	member := containers()
	require.Len(t, member, 1)
	req, err := http.NewRequest("POST", base+"/sandboxes", strings.NewReader(`{"image":{"uri":"`+ocitest.ImageName+`"},"extensions":{"hybox.io/runtime":"runc"},"entrypoint":["sleep","infinity"],"env":{"A":"b"}}`))
	require.NoError(t, err)
	req.Header.Set("OPEN-SANDBOX-API-KEY", "k")
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("the create was answered (%d %s); the failpoint should have killed the server:\n%s", resp.StatusCode, b, p.log.String())
	}
	_, _ = p.cmd.Process.Wait()
	require.Contains(t, p.log.String(), "failpoint reached")

	t.Setenv("HYBOX_TEST_FAILPOINT", "")
	p = startServe(t, bin, addr, data, flags(withPool)...)
	waitIdle(p)
	st, b := call(t, "GET", base+"/sandboxes", "")
	require.Equal(t, 200, st)
	var list struct{ Items []struct{ ID string } }
	require.NoError(t, json.Unmarshal(b, &list))
	assert.Empty(t, list.Items, "the half-made sandbox is not served")
	now := containers()
	require.Len(t, now, 1, "one member, nothing left over")
	assert.NotEqual(t, member, now, "the claimed member was destroyed and replaced")
	_, err = os.Stat(filepath.Join(data, "sandboxes", member[0]))
	assert.True(t, os.IsNotExist(err), "its directory is gone")

	// A configuration without the pool: its members are removed at start.
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	_, _ = p.cmd.Process.Wait()
	p = startServe(t, bin, addr, data, flags(noPool)...)
	assert.Empty(t, containers(), "members of a dropped pool are removed: %s", p.log.String())
}

// A [[pools]] entry becomes the API's pool: size sets both buffer counts,
// explicit counts win, limits and max_idle carry over.
func TestPoolConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hybox.toml")
	require.NoError(t, os.WriteFile(path, []byte("[[pools]]\nname = \"a\"\nimage = \"python:3\"\nsize = 3\nmax_idle = \"90s\"\nmemory = \"1Gi\"\n\n[[pools]]\nname = \"b\"\nimage = \"node:22\"\nruntime = \"runsc\"\nsize = 2\nbuffer_min = 1\npool_max = 8\n"), 0o600))
	c, err := loadConfig(path, func(string) string { return "" })
	require.NoError(t, err)
	require.Len(t, c.Pools, 2)
	a, b := c.Pools[0].request(), c.Pools[1].request()
	assert.Equal(t, "python:3", a.Template.Image.URI)
	assert.Equal(t, 3, a.CapacitySpec.BufferMin)
	assert.Equal(t, 3, a.CapacitySpec.BufferMax)
	assert.Equal(t, 90, a.Template.MaxIdleSeconds)
	assert.Equal(t, map[string]string{"memory": "1Gi"}, a.Template.ResourceLimits)
	assert.Equal(t, "runsc", b.Template.Runtime)
	assert.Equal(t, 1, b.CapacitySpec.BufferMin)
	assert.Equal(t, 2, b.CapacitySpec.BufferMax)
	assert.Equal(t, 8, b.CapacitySpec.PoolMax)
}
