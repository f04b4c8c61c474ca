package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/policy/egress/egresstest"
	"github.com/hybox-dev/hybox/runtimes/oci/ocitest"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

// poolBody is a create-pool request for the test image.
func poolBody(name, runtime string, size int) map[string]any {
	return map[string]any{"name": name,
		"template":     map[string]any{"image": map[string]string{"uri": ocitest.ImageName}, "runtime": runtime},
		"capacitySpec": map[string]int{"bufferMin": size, "bufferMax": size, "poolMin": 0, "poolMax": 16}}
}

func (h *harness) pool(name string) api.Pool {
	h.t.Helper()
	st, b, _ := h.do("GET", "/v1/pools/"+name, nil)
	require.Equal(h.t, 200, st, string(b))
	var p api.Pool
	require.NoError(h.t, json.Unmarshal(b, &p))
	return p
}

// waitIdle waits until pool name has n idle members and none starting.
func (h *harness) waitIdle(name string, n int) api.Pool {
	h.t.Helper()
	var p api.Pool
	require.Eventually(h.t, func() bool {
		p = h.pool(name)
		return p.Status.Available == n && p.Status.Starting == 0
	}, 90*time.Second, 50*time.Millisecond, "pool %s never had %d idle members", name, n)
	return p
}

// idleIDs are the ids of pool name's idle members, oldest first.
func (h *harness) idleIDs(name string) []string {
	ps := h.srv.pools
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var ids []string
	for _, m := range ps.pools[name].idle {
		ids = append(ids, m.ID)
	}
	return ids
}

func (h *harness) containerIDs(t *testing.T) map[string]bool {
	c := ocitest.Client(t, ocitest.Socket(), "hybox-test-server")
	cs, err := c.Containers(context.Background())
	require.NoError(t, err)
	out := map[string]bool{}
	for _, x := range cs {
		out[x.ID()] = true
	}
	return out
}

func TestPoolsBadInput(t *testing.T) {
	h := newHarness(t, "", harnessOpts{containers: true})
	for _, tc := range []struct {
		name string
		body any
		code string
		msg  string
	}{
		{"no image", map[string]any{"name": "a", "template": map[string]any{"image": map[string]string{"uri": " "}}, "capacitySpec": map[string]int{"bufferMin": 1, "bufferMax": 1, "poolMin": 0, "poolMax": 1}}, "INVALID_REQUEST", "template.image.uri"},
		{"image not present", func() map[string]any {
			b := poolBody("a", "runc", 1)
			b["template"].(map[string]any)["image"] = map[string]string{"uri": "localhost/nothing:here"}
			return b
		}(), "INVALID_REQUEST", "localhost/nothing:here is not present"},
		{"wasm", func() map[string]any {
			b := poolBody("a", "", 1)
			b["template"].(map[string]any)["image"] = map[string]string{"uri": "wasm://default"}
			return b
		}(), "INVALID_REQUEST", "keeps no warm pools"},
		{"unknown runtime", poolBody("a", "kata", 1), "INVALID_REQUEST", "kata"},
		{"bad name", poolBody("Not_A_Label", "runc", 1), "INVALID_REQUEST", "DNS label"},
		{"buffer above max", func() map[string]any {
			b := poolBody("a", "runc", 1)
			b["capacitySpec"] = map[string]int{"bufferMin": 3, "bufferMax": 2, "poolMin": 0, "poolMax": 4}
			return b
		}(), "INVALID_REQUEST", "bufferMin 3 is more than bufferMax 2"},
		{"bad limit", func() map[string]any {
			b := poolBody("a", "runc", 1)
			b["template"].(map[string]any)["resourceLimits"] = map[string]string{"gpu": "1"}
			return b
		}(), "INVALID_REQUEST", "gpu"},
	} {
		st, b, _ := h.do("POST", "/v1/pools", tc.body)
		require.Equal(t, 400, st, "%s: %s", tc.name, b)
		var e api.Error
		require.NoError(t, json.Unmarshal(b, &e))
		assert.Equal(t, tc.code, string(e.Code), tc.name)
		assert.Contains(t, e.Message, tc.msg, tc.name)
	}
	st, b, _ := h.do("GET", "/v1/pools/none", nil)
	assert.Equal(t, 404, st, string(b))
	st, b, _ = h.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]string{"uri": ocitest.ImageName},
		"extensions": map[string]string{"poolRef": "none"}})
	assert.Equal(t, 400, st, string(b))
	assert.Contains(t, string(b), `pool \"none\" does not exist`)

	st, b, _ = h.do("POST", "/v1/pools", poolBody("a", "runc", 0))
	require.Equal(t, 201, st, string(b))
	t.Cleanup(func() { h.do("DELETE", "/v1/pools/a", nil) })
	st, b, _ = h.do("POST", "/v1/pools", poolBody("a", "runc", 0))
	assert.Equal(t, 409, st, string(b))
	// poolRef with another image, or with volumes, is refused.
	st, b, _ = h.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]string{"uri": "python:3.12"},
		"extensions": map[string]string{"poolRef": "a"}})
	assert.Equal(t, 400, st, string(b))
	assert.Contains(t, string(b), "runs "+ocitest.ImageName)
	st, b, _ = h.do("PUT", "/v1/pools/a", map[string]any{"capacitySpec": map[string]int{"bufferMin": 0, "bufferMax": 9, "poolMin": 0, "poolMax": 4}})
	assert.Equal(t, 400, st, string(b))
}

// A claimed member is a sandbox like a cold one: the request's egress
// policy and vault enforced, its limits, env and entrypoint; the pool
// refills; the claim routes are not reachable from outside.
func TestPoolClaim(t *testing.T) {
	up := startUpstream(t)
	key := testVaultKey(t)
	h := newHarness(t, "", harnessOpts{containers: true, upstream: up, vaultKey: key})
	for _, runtime := range []string{"runc", "runsc"} {
		t.Run(runtime, func(t *testing.T) {
			name := "py-" + runtime
			body := poolBody(name, runtime, 1)
			if runtime == "runsc" {
				// gVisor's pools serve their own limits only.
				body["template"].(map[string]any)["resourceLimits"] = map[string]string{"memory": "300Mi"}
			}
			st, b, _ := h.do("POST", "/v1/pools", body)
			require.Equal(t, 201, st, string(b))
			t.Cleanup(func() { h.do("DELETE", "/v1/pools/"+name, nil) })
			h.waitIdle(name, 1)
			members := h.idleIDs(name)
			sb := h.create(map[string]any{
				"image":           map[string]string{"uri": ocitest.ImageName},
				"extensions":      map[string]string{"hybox.io/runtime": runtime},
				"entrypoint":      []string{"sh", "-c", "echo up-$GREETING > /tmp/entry; exec sleep infinity"},
				"env":             map[string]string{"GREETING": "hello"},
				"metadata":        map[string]string{"team": "pools"},
				"resourceLimits":  map[string]string{"memory": "300Mi"},
				"networkPolicy":   egressPolicy(),
				"credentialProxy": map[string]bool{"enabled": true},
			})
			t.Cleanup(func() { h.do("DELETE", "/v1/sandboxes/"+sb.ID, nil) })
			assert.Equal(t, []string{sb.ID}, members, "the create claimed the idle member")
			assert.Equal(t, api.SandboxStateRunning, sb.Status.State)
			assert.Equal(t, map[string]string{"team": "pools"}, sb.Metadata)
			rec, err := h.srv.store.get(sb.ID)
			require.NoError(t, err)
			assert.Equal(t, name, rec.Pool)

			assert.Equal(t, "hello", lines(h.command(sb.ID, "echo $GREETING")))
			require.Eventually(t, func() bool { return lines(h.command(sb.ID, "cat /tmp/entry 2>/dev/null")) == "up-hello" },
				10*time.Second, 50*time.Millisecond, "the entrypoint ran with the sandbox's env")
			mem := lines(h.command(sb.ID, "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"))
			assert.Equal(t, "314572800", mem, "the claim set the sandbox's memory limit")
			// The egress policy and the vault hold as for a cold sandbox.
			st, b = h.egressCall(sb.ID, "POST", "/credential-vault", vaultBody(egresstest.BoundName))
			require.Equal(t, 201, st, string(b))
			probe := containerProber(t, h, sb.ID)
			assert.Equal(t, "OK 200 "+up.Allowed.String(), probe("url", "http://allowed.test/"))
			assert.Equal(t, "NXDOMAIN", probe("resolve", "denied.test"))
			assert.Equal(t, "REFUSED", probe("tcp", up.Denied.String(), "80"), "direct IP")
			assert.Equal(t, "hybox sandbox "+sb.ID, probe("issuer", up.Bound.String(), egresstest.BoundName))
			// The claim routes belong to the server.
			for _, p := range []string{execd.ClaimPath, execd.ClaimBeginPath, "/hybox"} {
				st, _ := h.execd(sb.ID, "GET", p, nil)
				assert.Equal(t, 404, st, p)
			}
			// The pool refills, and counts what was claimed from it.
			p := h.waitIdle(name, 1)
			assert.Equal(t, 1, p.Status.Allocated)
			assert.NotEqual(t, members, h.idleIDs(name))
			st, _, _ = h.do("DELETE", "/v1/sandboxes/"+sb.ID, nil)
			require.Equal(t, 204, st)
			assert.Equal(t, 0, h.pool(name).Status.Allocated)
		})
	}
}

// A claim that fails (the member was reserved behind the server's back)
// falls back to a cold create, and the broken member is removed; a pool
// and its members survive a restart; deleting the pool leaves nothing.
func TestPoolFallbackRestartDelete(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, dir, harnessOpts{containers: true})
	st, b, _ := h.do("POST", "/v1/pools", poolBody("fb", "runc", 2))
	require.Equal(t, 201, st, string(b))
	h.waitIdle("fb", 2)
	ids := h.idleIDs("fb")
	for _, id := range ids {
		reserve(t, filepath.Join(dir, "sandboxes", id, "run", "execd.sock"))
	}
	sb := h.create(map[string]any{"image": map[string]string{"uri": ocitest.ImageName}, "extensions": map[string]string{"hybox.io/runtime": "runc"},
		"entrypoint": []string{"sleep", "infinity"}})
	assert.NotContains(t, ids, sb.ID, "served cold")
	assert.Equal(t, "cold", lines(h.command(sb.ID, "echo cold")))
	rec, err := h.srv.store.get(sb.ID)
	require.NoError(t, err)
	assert.Empty(t, rec.Pool)
	st, _, _ = h.do("DELETE", "/v1/sandboxes/"+sb.ID, nil)
	require.Equal(t, 204, st)
	// The reserved member that was tried is gone; the pool refills.
	require.Eventually(t, func() bool { return !h.containerIDs(t)[ids[0]] }, 30*time.Second, 50*time.Millisecond)
	// The other reserved member is still idle as far as the server knows;
	// a restart finds it reserved and removes it, keeps the pool and its
	// good members, and refills.
	h.waitIdle("fb", 2)
	before := h.idleIDs("fb")
	h.close()
	h = newHarness(t, dir, harnessOpts{containers: true})
	p := h.waitIdle("fb", 2)
	assert.Equal(t, api.PoolSourceAPI, p.Source)
	after := h.idleIDs("fb")
	kept := 0
	for _, id := range before {
		if id != ids[1] {
			assert.Contains(t, after, id, "a good member survived the restart")
			kept++
		}
	}
	assert.Positive(t, kept)
	assert.NotContains(t, after, ids[1], "the reserved member was removed")
	assert.False(t, h.containerIDs(t)[ids[1]])

	st, b, _ = h.do("DELETE", "/v1/pools/fb", nil)
	require.Equal(t, 204, st, string(b))
	cs := h.containerIDs(t)
	for _, id := range append(after, ids...) {
		assert.False(t, cs[id], "container of member %s is gone", id)
		_, err := os.Stat(filepath.Join(dir, "sandboxes", id))
		assert.True(t, os.IsNotExist(err), "directory of member %s is gone", id)
	}
	members, err := h.srv.store.listMembers()
	require.NoError(t, err)
	assert.Empty(t, members)
	st, _, _ = h.do("GET", "/v1/pools/fb", nil)
	assert.Equal(t, 404, st)
}

// reserve begins a claim of the member behind sock.
func reserve(t *testing.T, sock string) {
	t.Helper()
	// The path can be longer than a socket address holds: dial it
	// through a descriptor of its directory.
	dir, err := os.Open(filepath.Dir(sock))
	require.NoError(t, err)
	defer dir.Close()
	short := fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(sock))
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", short)
	}}}
	resp, err := c.Post("http://execd"+execd.ClaimBeginPath, "application/json", strings.NewReader(""))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
}

// Pools of the configuration file: one whose image is missing (and one
// defined twice) is logged and skipped, and the server starts with the
// good one, which the API cannot change or delete.
func TestConfiguredPools(t *testing.T) {
	pool := func(name, image string) api.CreatePoolRequest {
		return api.CreatePoolRequest{Name: name, Template: api.PoolTemplate{Image: api.ImageSpec{URI: image}, Runtime: "runc"},
			CapacitySpec: api.PoolCapacitySpec{BufferMin: 0, BufferMax: 0, PoolMax: 4}}
	}
	h := newHarness(t, "", harnessOpts{containers: true, pools: []api.CreatePoolRequest{
		pool("good", ocitest.ImageName), pool("missing", "localhost/not/there:1"), pool("good", "localhost/other:1")}})
	st, b, _ := h.do("GET", "/v1/pools", nil)
	require.Equal(t, 200, st, string(b))
	var list api.PoolList
	require.NoError(t, json.Unmarshal(b, &list))
	require.Len(t, list.Items, 1)
	assert.Equal(t, "good", list.Items[0].Name)
	assert.Equal(t, ocitest.ImageName, list.Items[0].Template.Image.URI, "the first definition is kept")
	assert.Equal(t, api.PoolSourceConfig, list.Items[0].Source)
	st, b, _ = h.do("DELETE", "/v1/pools/good", nil)
	assert.Equal(t, 400, st, string(b))
	assert.Contains(t, string(b), "configuration file")
}
