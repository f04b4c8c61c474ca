package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/runtimes/oci/ocitest"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

// Container sandboxes through the public API: the same calls as for wasm,
// plus what only containers have (ports, terminals).
func TestContainerSandboxesThroughAPI(t *testing.T) {
	h := newHarness(t, "", harnessOpts{containers: true, ingressDomain: "sandbox.test"})
	for _, runtime := range []string{"runc", "runsc"} {
		t.Run(runtime, func(t *testing.T) {
			sb := h.create(map[string]any{
				"image":          map[string]string{"uri": ocitest.ImageName},
				"extensions":     map[string]string{"hybox.io/runtime": runtime},
				"entrypoint":     []string{"sleep", "infinity"},
				"env":            map[string]string{"GREETING": "hello"},
				"resourceLimits": map[string]string{"memory": "256Mi", "cpu": "1"},
			})
			t.Cleanup(func() { h.do("DELETE", "/v1/sandboxes/"+sb.ID, nil) })
			assert.Equal(t, api.SandboxStateRunning, sb.Status.State)

			o := h.command(sb.ID, "echo $GREETING; uname -s; exit 5")
			assert.Equal(t, []string{"hello", "Linux"}, o.stdout)
			require.NotNil(t, o.err)
			assert.Equal(t, "5", o.err.EValue)
			require.Nil(t, h.code(sb.ID, "python", "x = 41").err)
			assert.Equal(t, "42", h.code(sb.ID, "python", "x + 1").results[0]["text"])

			// Containers cannot fork yet: a precise 400 naming the tier that can.
			st, fb, _ := h.do("POST", "/v1/sandboxes/"+sb.ID+"/fork", map[string]any{"count": 1})
			assert.Equal(t, http.StatusBadRequest, st, string(fb))
			assert.Contains(t, string(fb), `"code":"NOT_SUPPORTED"`)
			assert.Contains(t, string(fb), "only wasm sandboxes can")
			st, fb, _ = h.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]string{"uri": ocitest.ImageName},
				"extensions": map[string]string{"hybox.io/runtime": runtime, "hybox.io/isolation": "per-call"}})
			assert.Equal(t, http.StatusBadRequest, st, string(fb))
			assert.Contains(t, string(fb), `"code":"NOT_SUPPORTED"`)

			// A web server inside the sandbox, reached through every route.
			st, b := h.execd(sb.ID, "POST", "/command", map[string]any{
				"command": "mkdir -p /srv && echo served > /srv/index.txt && cd /srv && exec python3 -m http.server 8000 --bind 0.0.0.0", "background": true})
			require.Equal(t, 200, st, string(b))
			get := func(path string, hdr ...string) (int, string) {
				var st int
				var body []byte
				require.Eventually(t, func() bool {
					st, body, _ = h.do("GET", path, nil, hdr...)
					return st != http.StatusBadGateway
				}, 15*time.Second, 50*time.Millisecond)
				return st, string(body)
			}
			st, body := get("/v1/sandboxes/" + sb.ID + "/proxy/8000/index.txt")
			assert.Equal(t, 200, st)
			assert.Equal(t, "served\n", body)
			st, body = get("/index.txt", "OpenSandbox-Ingress-To", sb.ID+"-8000")
			assert.Equal(t, 200, st)
			assert.Equal(t, "served\n", body)

			// A port nothing listens on: 502 with {code, message} naming
			// the sandbox and the port (and not the address tried).
			for _, hdr := range [][]string{nil, {"OpenSandbox-Ingress-To", sb.ID + "-8001"}} {
				path := "/v1/sandboxes/" + sb.ID + "/proxy/8001/"
				if hdr != nil {
					path = "/"
				}
				st, b, _ := h.do("GET", path, nil, hdr...)
				require.Equal(t, http.StatusBadGateway, st, string(b))
				var e struct{ Code, Message string }
				require.NoError(t, json.Unmarshal(b, &e), "502 body %q", b)
				assert.Equal(t, "SANDBOX_UNREACHABLE", e.Code)
				assert.Contains(t, e.Message, "sandbox "+sb.ID)
				assert.Contains(t, e.Message, "port 8001")
				assert.NotContains(t, e.Message, "10.231.", "the 502 does not reveal the sandbox's address")
			}

			// Pause freezes it; resume brings it back with its state.
			st, _, _ = h.do("POST", "/v1/sandboxes/"+sb.ID+"/pause", nil)
			require.Equal(t, 202, st)
			st, _ = h.execd(sb.ID, "POST", "/command", map[string]any{"command": "echo hi"})
			assert.Equal(t, 409, st)
			st, _, _ = h.do("POST", "/v1/sandboxes/"+sb.ID+"/resume", nil)
			require.Equal(t, 202, st)
			assert.Equal(t, "41", h.code(sb.ID, "python", "x").results[0]["text"])

			// A terminal over WebSocket, through host routing.
			terminal(t, h, sb.ID)
		})
	}
}

// terminal opens a PTY session and runs a command in it over WebSocket,
// routed by Host (<id>-44772.<domain>).
func terminal(t *testing.T, h *harness, id string) {
	t.Helper()
	st, b := h.execd(id, "POST", "/pty", map[string]any{})
	require.Equal(t, 200, st, string(b))
	var sess struct {
		SessionID string `json:"session_id"`
	}
	require.NoError(t, json.Unmarshal(b, &sess))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hdr := http.Header{}
	hdr.Set("OPEN-SANDBOX-API-KEY", testKey)
	hdr.Set("Host", fmt.Sprintf("%s-44772.sandbox.test", id))
	u := strings.Replace(h.ts.URL, "http://", "ws://", 1) + "/pty/" + sess.SessionID + "/ws"
	c, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: hdr, Host: fmt.Sprintf("%s-44772.sandbox.test", id)})
	require.NoError(t, err)
	defer c.CloseNow()
	_, first, err := c.Read(ctx)
	require.NoError(t, err)
	assert.Contains(t, string(first), `"connected"`)
	require.NoError(t, c.Write(ctx, websocket.MessageBinary, append([]byte{0}, []byte("echo pty-$((6*7))\n")...)))
	var out strings.Builder
	for !strings.Contains(out.String(), "pty-42") {
		typ, msg, err := c.Read(ctx)
		require.NoError(t, err, "terminal output so far: %q", out.String())
		if typ == websocket.MessageBinary && len(msg) > 0 && (msg[0] == 1 || msg[0] == 3) {
			out.Write(msg[1:])
		}
	}
}
