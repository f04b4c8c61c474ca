package server

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/hybox-dev/hybox/runtimes/oci/ocitest"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

// expiresAt reads a sandbox's expiresAt through the lifecycle API (which
// renews nothing itself); nil when it has none.
func (h *harness) expiresAt(id string) *time.Time {
	h.t.Helper()
	st, b, _ := h.do("GET", "/v1/sandboxes/"+id, nil)
	require.Equal(h.t, http.StatusOK, st, string(b))
	var sb api.Sandbox
	require.NoError(h.t, json.Unmarshal(b, &sb))
	if sb.ExpiresAt.IsZero() {
		return nil
	}
	return &sb.ExpiresAt
}

// TestRenewOnAccess checks OpenSandbox's renew on access on a wasm sandbox,
// whose execd traffic goes through the proxy route: each access moves
// expiresAt to at least now+N, a flood writes it once, a paused sandbox, a
// sandbox that did not opt in and one without expiry are left alone, and
// invalid values are refused at creation.
func TestRenewOnAccess(t *testing.T) {
	h := newHarness(t, "", harnessOpts{})
	renewing := map[string]any{"timeout": 60, "extensions": map[string]string{"access.renew.extend.seconds": "300"}}
	sb := h.create(renewing)
	first := h.expiresAt(sb.ID)
	require.NotNil(t, first)
	assert.Equal(t, *first, *h.expiresAt(sb.ID), "lifecycle reads do not renew")

	before := time.Now()
	o := h.command(sb.ID, "echo hi")
	require.Nil(t, o.err)
	renewed := h.expiresAt(sb.ID)
	require.NotNil(t, renewed)
	assert.False(t, renewed.Before(before.Add(300*time.Second).Truncate(time.Second)), "expiresAt %s, want at least %s", renewed, before.Add(300*time.Second))

	// A flood of requests within the minute writes nothing more.
	for range 30 {
		st, _ := h.execd(sb.ID, "GET", "/ping", nil)
		require.Equal(t, http.StatusOK, st)
	}
	assert.Equal(t, *renewed, *h.expiresAt(sb.ID))

	// Paused: traffic that reaches it does not renew it.
	paused := h.create(renewing)
	pausedExp := h.expiresAt(paused.ID)
	st, b, _ := h.do("POST", "/v1/sandboxes/"+paused.ID+"/pause", nil)
	require.Equal(t, http.StatusAccepted, st, string(b))
	st, _ = h.execd(paused.ID, "GET", "/ping", nil)
	require.Equal(t, http.StatusOK, st)
	assert.Equal(t, *pausedExp, *h.expiresAt(paused.ID))

	// Not opted in, and no expiry at all.
	plain := h.create(map[string]any{"timeout": 60})
	plainExp := h.expiresAt(plain.ID)
	require.Nil(t, h.command(plain.ID, "echo hi").err)
	assert.Equal(t, *plainExp, *h.expiresAt(plain.ID))
	forever := h.create(map[string]any{"extensions": map[string]string{"access.renew.extend.seconds": "86400"}})
	require.Nil(t, h.command(forever.ID, "echo hi").err)
	assert.Nil(t, h.expiresAt(forever.ID))

	// Invalid values: a 400 naming the key, and no sandbox.
	st, b, _ = h.do("GET", "/v1/sandboxes", nil)
	require.Equal(t, http.StatusOK, st)
	var list api.ListSandboxesResponse
	require.NoError(t, json.Unmarshal(b, &list))
	count := len(list.Items)
	for _, v := range []string{"299", "86401", "0", "-300", "0300", " 300", "300s", "1e3", "abc"} {
		st, b, _ := h.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]string{"uri": "wasm://default"},
			"timeout": 60, "extensions": map[string]string{"access.renew.extend.seconds": v}})
		require.Equal(t, http.StatusBadRequest, st, "%q: %s", v, b)
		var e api.Error
		require.NoError(t, json.Unmarshal(b, &e))
		assert.Equal(t, api.ErrorCodeINVALIDREQUEST, e.Code, v)
		assert.Contains(t, e.Message, `extensions["access.renew.extend.seconds"]`, v)
	}
	st, b, _ = h.do("GET", "/v1/sandboxes", nil)
	require.Equal(t, http.StatusOK, st)
	require.NoError(t, json.Unmarshal(b, &list))
	assert.Len(t, list.Items, count, "nothing half-made")
}

// TestRenewOnAccessContainer checks that traffic to a container's own port
// through the proxy route renews it.
func TestRenewOnAccessContainer(t *testing.T) {
	h := newHarness(t, "", harnessOpts{containers: true})
	sb := h.create(map[string]any{
		"image":      map[string]string{"uri": ocitest.ImageName},
		"extensions": map[string]string{"hybox.io/runtime": "runc", "access.renew.extend.seconds": "600"},
		"timeout":    60,
		"entrypoint": []string{"sh", "-c", "mkdir -p /srv && echo served > /srv/index.txt && cd /srv && exec python3 -m http.server 8000 --bind 0.0.0.0"},
	})
	t.Cleanup(func() { h.do("DELETE", "/v1/sandboxes/"+sb.ID, nil) })
	first := h.expiresAt(sb.ID)
	require.NotNil(t, first)
	before := time.Now()
	var st int
	var body []byte
	require.Eventually(t, func() bool {
		st, body, _ = h.do("GET", "/v1/sandboxes/"+sb.ID+"/proxy/8000/index.txt", nil)
		return st != http.StatusBadGateway
	}, 15*time.Second, 50*time.Millisecond)
	require.Equal(t, http.StatusOK, st, string(body))
	assert.Equal(t, "served\n", string(body))
	renewed := h.expiresAt(sb.ID)
	require.NotNil(t, renewed)
	assert.False(t, renewed.Before(before.Add(600*time.Second).Truncate(time.Second)), "expiresAt %s, want at least %s", renewed, before.Add(600*time.Second))
}

// TestRenewOnAccessDocumented holds the document's pattern for the
// extension and the server's validation equal.
func TestRenewOnAccessDocumented(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Pattern string `yaml:"pattern"`
				} `yaml:"properties"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	require.NoError(t, yaml.Unmarshal(openAPIDocument, &doc))
	pattern := doc.Components.Schemas["Extensions"].Properties[extRenewOnAccess].Pattern
	require.NotEmpty(t, pattern)
	re := regexp.MustCompile(pattern)
	values := []string{"", " 300", "300 ", "+300", "0300", "3e2", "300.0", "abc", "-1"}
	for n := range 100000 {
		values = append(values, strconv.Itoa(n))
	}
	for _, v := range values {
		ext := map[string]string{extRenewOnAccess: v}
		if v == "" {
			ext = nil // the server drops empty extensions before validating
		}
		_, err := renewOnAccessOf(ext)
		if re.MatchString(v) != (err == nil) {
			t.Errorf("%q: document matches %v, server error %v", v, re.MatchString(v), err)
		}
	}
}
