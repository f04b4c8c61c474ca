package server

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

func (h *harness) fork(id string, body any) []api.Sandbox {
	h.t.Helper()
	st, b, _ := h.do("POST", "/v1/sandboxes/"+id+"/fork", body)
	require.Equal(h.t, http.StatusAccepted, st, string(b))
	var resp api.ForkSandboxResponse
	require.NoError(h.t, json.Unmarshal(b, &resp))
	return resp.Sandboxes
}

func (h *harness) result(id, lang, code string) string {
	h.t.Helper()
	o := h.code(id, lang, code)
	require.Nil(h.t, o.err, "%s: %+v", code, o.err)
	require.Len(h.t, o.results, 1, code)
	return o.results[0]["text"]
}

func (h *harness) contextIDs(id string) []string {
	h.t.Helper()
	st, b := h.execd(id, "GET", "/code/contexts", nil)
	require.Equal(h.t, http.StatusOK, st, string(b))
	var cs []api.CodeContext
	require.NoError(h.t, json.Unmarshal(b, &cs))
	var ids []string
	for _, c := range cs {
		ids = append(ids, c.ID)
	}
	return ids
}

// TestForkSandbox: POST /sandboxes/{id}/fork makes independent copies
// with the source's files, contexts (same ids) and variables.
func TestForkSandbox(t *testing.T) {
	h := newHarness(t, "", harnessOpts{})
	src := h.create(map[string]any{"timeout": 3600, "metadata": map[string]string{"team": "a", "k": "v"}})
	h.code(src.ID, "python", "x = 1\nopen('/workspace/f', 'w').write('parent')")
	h.code(src.ID, "javascript", "var y = 1;")
	ids := h.contextIDs(src.ID)
	require.Len(t, ids, 2)

	forks := h.fork(src.ID, map[string]any{"count": 2, "metadata": map[string]string{"k": "fork"}})
	require.Len(t, forks, 2)
	for _, f := range forks {
		assert.NotEqual(t, src.ID, f.ID)
		assert.Equal(t, api.SandboxStateRunning, f.Status.State)
		assert.Equal(t, map[string]string{"team": "a", "k": "fork"}, f.Metadata)
		assert.Equal(t, ids, h.contextIDs(f.ID))
		assert.Equal(t, "(1, 'parent')", h.result(f.ID, "python", "(x, open('/workspace/f').read())"))
		assert.Equal(t, "1", h.result(f.ID, "javascript", "y"))
	}
	a, b := forks[0].ID, forks[1].ID
	h.code(a, "python", "x = 2\nopen('/workspace/f', 'w').write('a')")
	h.code(src.ID, "python", "x = 3")
	assert.Equal(t, "(3, 'parent')", h.result(src.ID, "python", "(x, open('/workspace/f').read())"))
	assert.Equal(t, "(2, 'a')", h.result(a, "python", "(x, open('/workspace/f').read())"))
	assert.Equal(t, "(1, 'parent')", h.result(b, "python", "(x, open('/workspace/f').read())"))

	// A fork of a paused sandbox; an empty body means one copy.
	st, body, _ := h.do("POST", "/v1/sandboxes/"+src.ID+"/pause", nil)
	require.Equal(t, http.StatusAccepted, st, string(body))
	one := h.fork(src.ID, nil)
	require.Len(t, one, 1)
	require.Len(t, h.fork(src.ID, `{"count": 1.0}`), 1, "1.0 is an integer in JSON Schema")
	assert.Equal(t, "3", h.result(one[0].ID, "python", "x"))
	// Deleting a fork leaves the source alone.
	st, body, _ = h.do("DELETE", "/v1/sandboxes/"+a, nil)
	require.Equal(t, http.StatusNoContent, st, string(body))
	st, body, _ = h.do("POST", "/v1/sandboxes/"+src.ID+"/resume", nil)
	require.Equal(t, http.StatusAccepted, st, string(body))
	assert.Equal(t, "3", h.result(src.ID, "python", "x"))
}

// TestForkBadInput: every bad request is a precise 400/404/409 and leaves
// no sandbox behind.
func TestForkBadInput(t *testing.T) {
	h := newHarness(t, "", harnessOpts{})
	src := h.create(nil)
	for _, c := range []struct {
		name, id string
		body     any
		status   int
		code     api.ErrorCode
		msg      string
	}{
		{"count zero", src.ID, map[string]any{"count": 0}, 400, api.ErrorCodeINVALIDREQUEST, "count must be an integer between 1 and 16"},
		{"count too large", src.ID, map[string]any{"count": 17}, 400, api.ErrorCodeINVALIDREQUEST, "count must be an integer between 1 and 16"},
		{"count not a number", src.ID, `{"count":"two"}`, 400, api.ErrorCodeINVALIDREQUEST, "count"},
		{"count not an integer", src.ID, `{"count":1.5}`, 400, api.ErrorCodeINVALIDREQUEST, "count must be an integer"},
		{"metadata reserved", src.ID, map[string]any{"metadata": map[string]string{"opensandbox.io/x": "1"}}, 400, api.ErrorCodeINVALIDREQUEST, "reserved prefix"},
		{"not JSON", src.ID, `{`, 400, api.ErrorCodeINVALIDREQUEST, ""},
		{"not an object", src.ID, `[1]`, 400, api.ErrorCodeINVALIDREQUEST, ""},
		{"unknown sandbox", "no-such-sandbox", nil, 404, api.ErrorCodeSANDBOXNOTFOUND, "no-such-sandbox"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, b, _ := h.do("POST", "/v1/sandboxes/"+c.id+"/fork", c.body)
			require.Equal(t, c.status, st, string(b))
			var e api.Error
			require.NoError(t, json.Unmarshal(b, &e))
			assert.Equal(t, c.code, e.Code)
			assert.Contains(t, e.Message, c.msg)
		})
	}
	st, b, _ := h.do("GET", "/v1/sandboxes", nil)
	require.Equal(t, 200, st)
	var list api.ListSandboxesResponse
	require.NoError(t, json.Unmarshal(b, &list))
	assert.Len(t, list.Items, 1, "a refused fork leaves nothing")
}

// TestContextStateAcrossRestart: variables of code contexts survive
// pause/resume and a server restart, running and paused sandboxes alike.
func TestContextStateAcrossRestart(t *testing.T) {
	dataDir := t.TempDir()
	h := newHarness(t, dataDir, harnessOpts{})
	running := h.create(nil)
	paused := h.create(nil)
	for _, id := range []string{running.ID, paused.ID} {
		h.code(id, "python", "import string\nx = 41\nstring.capwords = lambda s: 'patched'")
		h.code(id, "javascript", "var y = 41;")
	}
	st, b, _ := h.do("POST", "/v1/sandboxes/"+paused.ID+"/pause", nil)
	require.Equal(t, http.StatusAccepted, st, string(b))
	h.close()

	h2 := newHarness(t, dataDir, harnessOpts{})
	st, b, _ = h2.do("POST", "/v1/sandboxes/"+paused.ID+"/resume", nil)
	require.Equal(t, http.StatusAccepted, st, string(b))
	for _, id := range []string{running.ID, paused.ID} {
		assert.Equal(t, "(42, 'patched')", h2.result(id, "python", "x += 1\n(x, string.capwords('a b'))"))
		assert.Equal(t, "42", h2.result(id, "javascript", "y += 1; y"))
	}
}

// TestIsolationExtension: per-call isolation through the API; an unknown
// value is a 400 and leaves nothing.
func TestIsolationExtension(t *testing.T) {
	h := newHarness(t, "", harnessOpts{})
	sb := h.create(map[string]any{"extensions": map[string]string{"hybox.io/isolation": "per-call"}})
	h.code(sb.ID, "python", "import json\nx = 1\njson.loads = None")
	assert.Equal(t, "(False, True)", h.result(sb.ID, "python", "import json\n('x' in dir(), json.loads is not None)"))
	st, b, _ := h.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]string{"uri": "wasm://default"},
		"extensions": map[string]string{"hybox.io/isolation": "sometimes"}})
	require.Equal(t, http.StatusBadRequest, st, string(b))
	assert.Contains(t, string(b), "hybox.io/isolation")
	st, b, _ = h.do("GET", "/v1/sandboxes", nil)
	require.Equal(t, 200, st)
	var list api.ListSandboxesResponse
	require.NoError(t, json.Unmarshal(b, &list))
	assert.Len(t, list.Items, 1)
}
