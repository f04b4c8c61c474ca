package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

func TestHealthAndRequestID(t *testing.T) {
	h := newHarness(t, "", harnessOpts{})
	for _, p := range []string{"/health", "/v1/health"} {
		st, b, hdr := h.do("GET", p, nil, "OPEN-SANDBOX-API-KEY", "", "X-Request-ID", "req-42")
		require.Equal(t, http.StatusOK, st)
		assert.JSONEq(t, `{"status":"healthy"}`, string(b))
		assert.Equal(t, "req-42", hdr.Get("X-Request-ID"))
	}
	// Errors echo the request id too, and one is generated when absent.
	st, _, hdr := h.do("GET", "/v1/sandboxes/nope", nil)
	require.Equal(t, http.StatusNotFound, st)
	assert.NotEmpty(t, hdr.Get("X-Request-ID"))
}

func TestAuth(t *testing.T) {
	h := newHarness(t, "", harnessOpts{})
	tests := []struct {
		name, key string
		code      api.ErrorCode
	}{
		{name: "missing", key: "", code: api.ErrorCodeMISSINGAPIKEY},
		{name: "wrong", key: "nope", code: api.ErrorCodeINVALIDAPIKEY},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, p := range []string{"/sandboxes", "/v1/sandboxes"} {
				st, b, _ := h.do("GET", p, nil, "OPEN-SANDBOX-API-KEY", tc.key)
				require.Equal(t, http.StatusUnauthorized, st)
				var e api.Error
				require.NoError(t, json.Unmarshal(b, &e))
				assert.Equal(t, tc.code, e.Code)
				assert.NotEmpty(t, e.Message)
			}
		})
	}
}

func TestRefusesToStartWithoutKey(t *testing.T) {
	o := Options{DataDir: t.TempDir(), Runtimes: nil}
	require.Error(t, o.Validate())
	o = Options{DataDir: t.TempDir(), Runtimes: nil, Insecure: true}
	require.ErrorContains(t, o.Validate(), "Runtimes")
}

// A shared directory is refused where it cannot work: as a relative path,
// or without a shared store.
func TestSharedDirValidation(t *testing.T) {
	sel, err := runtimes.NewSelector(nil, nil, "")
	require.NoError(t, err)
	for dir, want := range map[string]string{"shared": "not an absolute path", "/srv/shared": "SharedDir needs Shared"} {
		o := Options{DataDir: t.TempDir(), Runtimes: sel, Insecure: true, SharedDir: dir}
		require.ErrorContains(t, o.Validate(), want, dir)
	}
	for name, ok := range map[string]bool{"hybox-5f46ddcd58-7z9hv": true, "a/b": false, "..": false, ".": false, "": false} {
		assert.Equal(t, ok, validReplicaDir(name), name)
	}
}

func TestCreateValidation(t *testing.T) {
	h := newHarness(t, "", harnessOpts{})
	const (
		invalid     = api.ErrorCodeINVALIDREQUEST
		unsupported = api.ErrorCodeNOTSUPPORTED
	)
	tests := []struct {
		name string
		body string
		want int
		code api.ErrorCode
		msg  string
	}{
		{name: "malformed json", body: `{"image":`, want: 400, code: invalid, msg: "ends early"},
		{name: "empty body", body: ``, want: 400, code: invalid, msg: "empty"},
		{name: "trailing garbage", body: `{"image":{"uri":"wasm://default"}} x`, want: 400, code: invalid, msg: "trailing"},
		{name: "missing image", body: `{}`, want: 400, code: invalid, msg: "image.uri is required"},
		{name: "short timeout", body: `{"image":{"uri":"wasm://default"},"timeout":5}`, want: 400, code: invalid, msg: "at least 60"},
		{name: "reserved metadata", body: `{"image":{"uri":"wasm://default"},"metadata":{"opensandbox.io/x":"1"}}`, want: 400, code: invalid, msg: "reserved"},
		{name: "bad memory", body: `{"image":{"uri":"wasm://default"},"resourceLimits":{"memory":"lots"}}`, want: 400, code: invalid, msg: "resourceLimits.memory"},
		{name: "bad cpu", body: `{"image":{"uri":"wasm://default"},"resourceLimits":{"cpu":"-1"}}`, want: 400, code: invalid, msg: "resourceLimits.cpu"},
		{name: "unknown runtime", body: `{"image":{"uri":"wasm://default"},"extensions":{"hybox.io/runtime":"kata"}}`, want: 400, code: invalid, msg: "kata"},
		{name: "unknown wasm image", body: `{"image":{"uri":"wasm://ruby"}}`, want: 400, code: invalid, msg: "wasm://default"},
		{name: "bad platform", body: `{"image":{"uri":"wasm://default"},"platform":{"os":"plan9","arch":"amd64"}}`, want: 400, code: invalid, msg: "platform.os"},
		{name: "wrong type", body: `{"image":"wasm://default"}`, want: 400, code: invalid, msg: "image: want an object, got a string"},
		{name: "wrong nested type", body: `{"image":{"uri":"wasm://default"},"networkPolicy":{"egress":{}}}`, want: 400, code: invalid, msg: "networkPolicy.egress: want an array"},
		{name: "bad policy rule", body: `{"image":{"uri":"wasm://default"},"networkPolicy":{"egress":[{"action":"maybe","target":"a.com"}]}}`, want: 400, code: invalid, msg: "egress[0].action"},
		{name: "vault without policy", body: `{"image":{"uri":"wasm://default"},"credentialProxy":{"enabled":true}}`, want: 400, code: invalid, msg: "needs a networkPolicy"},
		{name: "snapshot", body: `{"snapshotId":"s1","image":{"uri":"wasm://default"}}`, want: 400, code: unsupported, msg: "snapshots"},
		{name: "pvc volume over the system files", body: `{"image":{"uri":"wasm://default"},"volumes":[{"name":"v","mountPath":"/etc","pvc":{"claimName":"x"}}]}`, want: 400, code: invalid, msg: "mountPath /etc is reserved"},
		{name: "relative mount", body: `{"image":{"uri":"wasm://default"},"volumes":[{"name":"v","mountPath":"data","host":{"path":"/tmp"}}]}`, want: 400, code: invalid, msg: "mountPath"},
		{name: "host volume, none allowed", body: `{"image":{"uri":"wasm://default"},"volumes":[{"name":"v","mountPath":"/data","host":{"path":"/tmp"}}]}`, want: 400, code: invalid, msg: "no allowed host paths are configured"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, b, _ := h.do("POST", "/v1/sandboxes", tc.body)
			require.Equal(t, tc.want, st, string(b))
			var e api.Error
			require.NoError(t, json.Unmarshal(b, &e))
			assert.Contains(t, e.Message, tc.msg)
			assert.Equal(t, tc.code, e.Code, e.Message)
		})
	}
	// Nothing was left behind by the refused requests.
	st, b, _ := h.do("GET", "/v1/sandboxes", nil)
	require.Equal(t, 200, st)
	var l api.ListSandboxesResponse
	require.NoError(t, json.Unmarshal(b, &l))
	assert.Empty(t, l.Items)
}

func TestLifecycle(t *testing.T) {
	h := newHarness(t, "", harnessOpts{})
	sb := h.create(map[string]any{"timeout": 600, "metadata": map[string]string{"team": "a", "env": "dev"},
		"entrypoint": []string{"tail", "-f", "/dev/null"}})
	require.NotEmpty(t, sb.ID)
	assert.Equal(t, api.SandboxStateRunning, sb.Status.State)
	assert.Equal(t, []string{"tail", "-f", "/dev/null"}, sb.Entrypoint)
	require.False(t, sb.ExpiresAt.IsZero())
	assert.InDelta(t, 600, sb.ExpiresAt.Sub(sb.CreatedAt).Seconds(), 1)

	// No-expiry sandbox has no expiresAt key at all.
	st, b, _ := h.do("POST", "/v1/sandboxes", `{"image":{"uri":"opensandbox/code-interpreter:v1.0.2"},"timeout":null,"metadata":{"team":"b"}}`)
	require.Equal(t, 202, st, string(b))
	var raw map[string]any
	require.NoError(t, json.Unmarshal(b, &raw))
	assert.NotContains(t, raw, "expiresAt")
	other := raw["id"].(string)

	st, b, _ = h.do("GET", "/sandboxes/"+sb.ID, nil)
	require.Equal(t, 200, st)
	var got api.Sandbox
	require.NoError(t, json.Unmarshal(b, &got))
	assert.Equal(t, sb.ID, got.ID)
	assert.Equal(t, "wasm://default", got.Image.URI)

	// Metadata filter (AND) and state filter (OR).
	list := func(q string) []string {
		st, b, _ := h.do("GET", "/v1/sandboxes?"+q, nil)
		require.Equal(t, 200, st, string(b))
		var l api.ListSandboxesResponse
		require.NoError(t, json.Unmarshal(b, &l))
		var ids []string
		for _, it := range l.Items {
			ids = append(ids, it.ID)
		}
		return ids
	}
	assert.Equal(t, []string{sb.ID}, list("metadata="+url.QueryEscape("team=a&env=dev")))
	assert.Empty(t, list("metadata="+url.QueryEscape("team=a&env=prod")))
	assert.ElementsMatch(t, []string{sb.ID, other}, list("state=Running&state=Paused"))
	assert.Empty(t, list("state=Paused"))
	assert.ElementsMatch(t, []string{sb.ID, other}, list("state=rUNNING"), "states match case-insensitively")
	assert.Empty(t, list("state=Allocated"), "a state no sandbox has matches nothing (no 400)")
	assert.ElementsMatch(t, []string{sb.ID, other}, list("state=Allocated,running"), "an unknown state in a list leaves the others")

	// Pagination.
	st, b, _ = h.do("GET", "/v1/sandboxes?page=1&pageSize=1", nil)
	require.Equal(t, 200, st)
	var l api.ListSandboxesResponse
	require.NoError(t, json.Unmarshal(b, &l))
	assert.Len(t, l.Items, 1)
	assert.Equal(t, api.Pagination{Page: 1, PageSize: 1, TotalItems: 2, TotalPages: 2, HasNextPage: true}, l.Pagination)
	st, _, _ = h.do("GET", "/v1/sandboxes?page=0", nil)
	assert.Equal(t, 400, st)

	// Merge patch: set, change, delete with null.
	st, b, _ = h.do("PATCH", "/v1/sandboxes/"+sb.ID+"/metadata", `{"env":null,"team":"z","new":"1"}`)
	require.Equal(t, 200, st, string(b))
	got = api.Sandbox{}
	require.NoError(t, json.Unmarshal(b, &got))
	assert.Equal(t, map[string]string{"team": "z", "new": "1"}, got.Metadata)
	st, _, _ = h.do("PATCH", "/v1/sandboxes/"+sb.ID+"/metadata", `{"opensandbox.io/a":"1"}`)
	assert.Equal(t, 400, st)

	// Renew.
	past := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	st, _, _ = h.do("POST", "/v1/sandboxes/"+sb.ID+"/renew-expiration", map[string]string{"expiresAt": past})
	assert.Equal(t, 400, st)
	future := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Millisecond)
	st, b, _ = h.do("POST", "/v1/sandboxes/"+sb.ID+"/renew-expiration", map[string]string{"expiresAt": future.Format(time.RFC3339Nano)})
	require.Equal(t, 200, st, string(b))
	st, b, _ = h.do("GET", "/v1/sandboxes/"+sb.ID, nil)
	require.Equal(t, 200, st)
	require.NoError(t, json.Unmarshal(b, &got))
	assert.True(t, got.ExpiresAt.Equal(future), "%v != %v", got.ExpiresAt, future)

	// Endpoints answer for execd and egress ports right away.
	for _, port := range []string{"44772", "18080"} {
		st, b, _ = h.do("GET", "/v1/sandboxes/"+sb.ID+"/endpoints/"+port+"?use_server_proxy=false", nil)
		require.Equal(t, 200, st, string(b))
		var ep api.Endpoint
		require.NoError(t, json.Unmarshal(b, &ep))
		assert.NotContains(t, ep.Endpoint, "://")
		assert.Contains(t, ep.Endpoint, "/sandboxes/"+sb.ID+"/proxy/"+port)
		want := headerExecdToken
		if port == "18080" {
			want = headerEgressAuth
		}
		assert.NotEmpty(t, ep.Headers[want], port)
	}
	st, _, _ = h.do("GET", "/v1/sandboxes/"+sb.ID+"/endpoints/99999", nil)
	assert.Equal(t, 400, st)

	// Pause refuses executions; resume restores them.
	st, _, _ = h.do("POST", "/v1/sandboxes/"+sb.ID+"/pause", nil)
	require.Equal(t, 202, st)
	st, _, _ = h.do("POST", "/v1/sandboxes/"+sb.ID+"/pause", nil)
	assert.Equal(t, 409, st, "pausing a paused sandbox")
	assert.Equal(t, []string{sb.ID}, list("state=Paused"))
	st, b = h.execd(sb.ID, "POST", "/command", map[string]any{"command": "echo hi"})
	assert.Equal(t, 409, st, string(b))
	st, _ = h.execd(sb.ID, "GET", "/ping", nil)
	assert.Equal(t, 200, st, "ping answers while paused")
	st, _, _ = h.do("POST", "/v1/sandboxes/"+sb.ID+"/resume", nil)
	require.Equal(t, 202, st)
	assert.Equal(t, []string{"hi"}, h.command(sb.ID, "echo hi").stdout)

	// Delete removes the record and the workspace.
	dir := h.srv.sandboxDir(sb.ID)
	require.DirExists(t, dir)
	st, _, _ = h.do("DELETE", "/v1/sandboxes/"+sb.ID, nil)
	require.Equal(t, 204, st)
	st, b, _ = h.do("GET", "/v1/sandboxes/"+sb.ID, nil)
	require.Equal(t, 404, st)
	assert.Contains(t, string(b), api.ErrorCodeSANDBOXNOTFOUND)
	assert.NoDirExists(t, dir)
	st, _, _ = h.do("DELETE", "/v1/sandboxes/"+sb.ID, nil)
	assert.Equal(t, 404, st)
}

func TestProxyAuth(t *testing.T) {
	h := newHarness(t, "", harnessOpts{})
	a := h.create(nil)
	b := h.create(nil)
	st, body, _ := h.do("GET", "/v1/sandboxes/"+b.ID+"/endpoints/44772", nil)
	require.Equal(t, 200, st)
	var epB api.Endpoint
	require.NoError(t, json.Unmarshal(body, &epB))

	path := "/v1/sandboxes/" + a.ID + "/proxy/44772/ping"
	st, _, _ = h.do("GET", path, nil, "OPEN-SANDBOX-API-KEY", "")
	assert.Equal(t, 401, st, "no credentials")
	st, _, _ = h.do("GET", path, nil, "OPEN-SANDBOX-API-KEY", "", headerExecdToken, epB.Headers[headerExecdToken])
	assert.Equal(t, 401, st, "another sandbox's token")
	st, _, _ = h.do("GET", path, nil)
	assert.Equal(t, 200, st, "API key")
	st, _ = h.execd(a.ID, "GET", "/ping", nil)
	assert.Equal(t, 200, st, "own token")
	st, _, _ = h.do("GET", "/v1/sandboxes/00000000-0000-4000-8000-000000000000/proxy/44772/ping", nil, "OPEN-SANDBOX-API-KEY", "")
	assert.Equal(t, 401, st, "unknown sandbox without credentials does not reveal existence")
	// A wasm sandbox has no other ports: nothing is served there.
	st, body, _ = h.do("GET", "/v1/sandboxes/"+a.ID+"/proxy/8000/", nil)
	assert.Equal(t, 404, st)
	assert.Contains(t, string(body), "runc")

	// A signed, expiring route: its token works for that sandbox and port
	// only, and the endpoint does not hand out the long-lived token.
	exp := time.Now().Add(time.Hour).Unix()
	st, body, _ = h.do("GET", fmt.Sprintf("/v1/sandboxes/%s/endpoints/44772?expires=%d", a.ID, exp), nil)
	require.Equal(t, 200, st, string(body))
	var signed api.Endpoint
	require.NoError(t, json.Unmarshal(body, &signed))
	require.NotContains(t, signed.Headers, headerExecdToken)
	tok := signed.Headers["Hybox-Route-Token"]
	require.NotEmpty(t, tok)
	st, _, _ = h.do("GET", path, nil, "OPEN-SANDBOX-API-KEY", "", "Hybox-Route-Token", tok)
	assert.Equal(t, 200, st, "route token for a's execd")
	st, _, _ = h.do("GET", "/v1/sandboxes/"+b.ID+"/proxy/44772/ping", nil, "OPEN-SANDBOX-API-KEY", "", "Hybox-Route-Token", tok)
	assert.Equal(t, 401, st, "a's route token on b")
	st, _, _ = h.do("GET", fmt.Sprintf("/v1/sandboxes/%s/endpoints/44772?expires=%d", a.ID, time.Now().Add(-time.Minute).Unix()), nil)
	assert.Equal(t, 400, st, "expires in the past")

	// Header routing reaches the same execd.
	st, body, _ = h.do("GET", "/ping", nil, "OpenSandbox-Ingress-To", a.ID+"-44772")
	assert.Equal(t, 200, st, string(body))
	st, _, _ = h.do("GET", "/ping", nil, "OpenSandbox-Ingress-To", a.ID+"-44772", "OPEN-SANDBOX-API-KEY", "")
	assert.Equal(t, 401, st, "header routing is authenticated too")
}

func TestPersistenceAcrossRestart(t *testing.T) {
	dataDir := t.TempDir()
	h := newHarness(t, dataDir, harnessOpts{})
	sb := h.create(map[string]any{"timeout": 3600, "metadata": map[string]string{"k": "v"}})
	o := h.command(sb.ID, "echo kept > /workspace/note.txt")
	require.Nil(t, o.err)
	h.close()

	h2 := newHarness(t, dataDir, harnessOpts{})
	st, b, _ := h2.do("GET", "/v1/sandboxes/"+sb.ID, nil)
	require.Equal(t, 200, st, string(b))
	var got api.Sandbox
	require.NoError(t, json.Unmarshal(b, &got))
	assert.Equal(t, map[string]string{"k": "v"}, got.Metadata)
	assert.True(t, got.ExpiresAt.Equal(sb.ExpiresAt))
	assert.Equal(t, api.SandboxStateRunning, got.Status.State)
	assert.Equal(t, []string{"kept"}, h2.command(sb.ID, "cat /workspace/note.txt").stdout)
}

func TestReaper(t *testing.T) {
	dataDir := t.TempDir()
	h := newHarness(t, dataDir, harnessOpts{})
	live := h.create(map[string]any{"timeout": 3600})
	dead := h.create(map[string]any{"timeout": 3600})
	expire := func(id string) {
		rec, err := h.srv.store.get(id)
		require.NoError(t, err)
		past := time.Now().Add(-time.Second)
		rec.ExpiresAt = &past
		require.NoError(t, h.srv.store.put(rec))
	}
	expire(dead.ID)
	h.srv.reapOnce(t.Context())
	st, _, _ := h.do("GET", "/v1/sandboxes/"+dead.ID, nil)
	assert.Equal(t, 404, st)
	assert.NoDirExists(t, h.srv.sandboxDir(dead.ID))
	st, _, _ = h.do("GET", "/v1/sandboxes/"+live.ID, nil)
	assert.Equal(t, 200, st)

	// A sandbox that expires while the server is down is deleted at start-up.
	expire(live.ID)
	h.close()
	h2 := newHarness(t, dataDir, harnessOpts{})
	st, _, _ = h2.do("GET", "/v1/sandboxes/"+live.ID, nil)
	assert.Equal(t, 404, st)
	_, err := os.Stat(filepath.Join(dataDir, "sandboxes", live.ID))
	assert.True(t, os.IsNotExist(err))
}

func TestUnknownRoutesAnswerJSON(t *testing.T) {
	h := newHarness(t, "", harnessOpts{})
	st, b, _ := h.do("GET", "/v1/nope", nil)
	require.Equal(t, 404, st)
	assert.Contains(t, string(b), `"code"`)
	sb := h.create(nil)
	st, b = h.execd(sb.ID, "GET", "/no/such/route", nil)
	require.Equal(t, 404, st)
	assert.Contains(t, string(b), `"code"`)
}

func TestOrphansRemovedAtStart(t *testing.T) {
	dataDir := t.TempDir()
	h := newHarness(t, dataDir, harnessOpts{})
	kept := h.create(nil)
	h.close()
	orphan := filepath.Join(dataDir, "sandboxes", "11111111-2222-4333-8444-555555555555")
	require.NoError(t, os.MkdirAll(filepath.Join(orphan, "fs", "workspace"), 0o755))
	leftover := filepath.Join(dataDir, "tmp", "run-x")
	require.NoError(t, os.MkdirAll(leftover, 0o755))

	h2 := newHarness(t, dataDir, harnessOpts{})
	assert.NoDirExists(t, orphan)
	assert.NoDirExists(t, leftover)
	assert.DirExists(t, h2.srv.sandboxDir(kept.ID))
}

func TestImagesWithoutContainerBackend(t *testing.T) {
	h := newHarness(t, "", harnessOpts{})
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/v1/images", ""},
		{"POST", "/v1/images/import", "not a tar"},
		{"POST", "/v1/images/pull", `{"ref":"python:3"}`},
		{"DELETE", "/v1/images/localhost/x:1", ""},
	} {
		st, b, _ := h.do(r.method, r.path, r.body)
		assert.Equal(t, http.StatusBadRequest, st, "%s %s", r.method, r.path)
		assert.Contains(t, string(b), `"code":"NOT_SUPPORTED"`, "%s %s", r.method, r.path)
		assert.Contains(t, string(b), "--containerd", "%s %s", r.method, r.path)
	}
	// A container image without a container backend is a clear 400,
	// whether or not the request names a runtime: it never becomes wasm.
	st, b, _ := h.do("POST", "/v1/sandboxes", `{"image":{"uri":"python:3"},"extensions":{"hybox.io/runtime":"runc"}}`)
	assert.Equal(t, 400, st)
	assert.Contains(t, string(b), "runc")
	st, b, _ = h.do("POST", "/v1/sandboxes", `{"image":{"uri":"python:3.12"}}`)
	assert.Equal(t, 400, st, string(b))
	var e struct{ Code, Message string }
	require.NoError(t, json.Unmarshal(b, &e), string(b))
	assert.Contains(t, e.Message, "image python:3.12 needs a container runtime; this server has none (start it with --containerd)")
	assert.NotEmpty(t, e.Code)
	st, b, _ = h.do("GET", "/v1/sandboxes", "")
	require.Equal(t, 200, st)
	assert.NotContains(t, string(b), "python:3", "a refused create leaves no record")
}

// The API shows the runtime each sandbox runs on, named or chosen.
func TestRuntimeInSandboxResponse(t *testing.T) {
	h := newHarness(t, "", harnessOpts{})
	for _, body := range []map[string]any{
		{"image": map[string]string{"uri": "wasm://default"}},
		{"image": map[string]string{"uri": "opensandbox/code-interpreter:v1.0.2"}, "extensions": map[string]string{"other": "x"}},
	} {
		sb := h.create(body)
		assert.Equal(t, "wasm", sb.Extensions["hybox.io/runtime"])
		st, b, _ := h.do("GET", "/v1/sandboxes/"+sb.ID, nil)
		require.Equal(t, 200, st)
		var got api.Sandbox
		require.NoError(t, json.Unmarshal(b, &got))
		assert.Equal(t, "wasm", got.Extensions["hybox.io/runtime"])
		if ext, ok := body["extensions"].(map[string]string); ok {
			assert.Equal(t, ext["other"], got.Extensions["other"], "the request's extensions are kept")
		}
		h.do("DELETE", "/v1/sandboxes/"+sb.ID, nil)
	}
}

// A GPU is refused plainly rather than silently not given.
func TestCreateRefusesGPU(t *testing.T) {
	h := newHarness(t, "", harnessOpts{})
	st, b, _ := h.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]string{"uri": "wasm://default"},
		"resourceLimits": map[string]string{"cpu": "1", "gpu": "1"}})
	require.Equal(t, 400, st, string(b))
	assert.Contains(t, string(b), "NOT_SUPPORTED")
	assert.Contains(t, string(b), "no GPUs")
	sb := h.create(map[string]any{"resourceLimits": map[string]string{"gpu": "0"}})
	h.do("DELETE", "/v1/sandboxes/"+sb.ID, nil)
}
