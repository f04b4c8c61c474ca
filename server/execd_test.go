package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

func TestCodeContexts(t *testing.T) {
	h := newHarness(t, "", harnessOpts{})
	sb := h.create(nil)

	// Default contexts keep state per language.
	require.Nil(t, h.code(sb.ID, "python", "x = 41").err)
	o := h.code(sb.ID, "python", "x + 1")
	require.Nil(t, o.err)
	require.Len(t, o.results, 1)
	assert.Equal(t, "42", o.results[0]["text"])

	require.Nil(t, h.code(sb.ID, "javascript", "var y = 20").err)
	o = h.code(sb.ID, "javascript", "y * 2 + 2")
	require.Nil(t, o.err)
	require.Len(t, o.results, 1)
	assert.Equal(t, "42", o.results[0]["text"])

	// print streams stdout; an exception is an error event.
	o = h.code(sb.ID, "python", "print('hello')\nprint('world')")
	assert.Equal(t, "hello\nworld\n", strings.Join(o.stdout, ""))
	assert.True(t, o.complete)
	o = h.code(sb.ID, "python", "1/0")
	require.NotNil(t, o.err)
	assert.Equal(t, "ZeroDivisionError", o.err.EName)
	assert.Equal(t, "division by zero", o.err.EValue)
	assert.False(t, o.complete)

	// Explicit contexts are isolated from each other.
	st, b := h.execd(sb.ID, "POST", "/code/context", map[string]string{"language": "python"})
	require.Equal(t, 200, st, string(b))
	var cctx struct{ ID, Language string }
	require.NoError(t, json.Unmarshal(b, &cctx))
	assert.Equal(t, "python", cctx.Language)
	st, b = h.execd(sb.ID, "POST", "/code", map[string]any{"context": map[string]string{"id": cctx.ID, "language": "python"}, "code": "x"})
	require.Equal(t, 200, st)
	o = summarise(t, b)
	require.NotNil(t, o.err)
	assert.Equal(t, "NameError", o.err.EName)

	st, b = h.execd(sb.ID, "GET", "/code/contexts?language=python", nil)
	require.Equal(t, 200, st)
	var ctxs []map[string]string
	require.NoError(t, json.Unmarshal(b, &ctxs))
	assert.Len(t, ctxs, 2)
	st, _ = h.execd(sb.ID, "DELETE", "/code/contexts/"+cctx.ID, nil)
	require.Equal(t, 200, st)
	st, b = h.execd(sb.ID, "POST", "/code", map[string]any{"context": map[string]string{"id": cctx.ID}, "code": "1"})
	assert.Equal(t, 404, st)
	assert.Contains(t, string(b), execd.CodeContextNotFound)

	// Files written by code are visible to commands and the files API.
	require.Nil(t, h.code(sb.ID, "python", "open('/workspace/p.txt','w').write('from python')").err)
	assert.Equal(t, []string{"from python"}, h.command(sb.ID, "cat /workspace/p.txt").stdout)
	st, b = h.execd(sb.ID, "GET", "/files/download?path=/workspace/p.txt", nil)
	require.Equal(t, 200, st)
	assert.Equal(t, "from python", string(b))
}

func TestCodeBadInput(t *testing.T) {
	h := newHarness(t, "", harnessOpts{execTimeout: 2 * time.Second, outputLimit: 1 << 20, memory: 256 << 20})
	sb := h.create(nil)
	tests := []struct {
		name string
		body string
		want int
		code api.ErrorCode
		says string // a substring of the body
	}{
		{name: "malformed", body: `{"code":`, want: 400, code: execd.CodeInvalidRequestBody},
		{name: "missing code", body: `{"context":{"language":"python"}}`, want: 400, code: execd.CodeInvalidRequestBody},
		{name: "unknown language", body: `{"context":{"language":"cobol"},"code":"1"}`, want: 400, code: execd.CodeUnknownLanguage},
		{name: "java (no interpreter here)", body: `{"context":{"language":"java"},"code":"1"}`, want: 400, code: execd.CodeUnknownLanguage, says: "container tier"},
		{name: "go (no toolchain here)", body: `{"context":{"language":"golang"},"code":"1"}`, want: 400, code: execd.CodeUnknownLanguage, says: "container tier"},
		{name: "unknown context", body: `{"context":{"id":"nope"},"code":"1"}`, want: 404, code: execd.CodeContextNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, b := h.execd(sb.ID, "POST", "/code", tc.body)
			require.Equal(t, tc.want, st, string(b))
			assert.Contains(t, string(b), tc.code)
			assert.Contains(t, string(b), tc.says)
		})
	}
	other := h.create(nil)
	require.Nil(t, h.code(other.ID, "python", "kept = 'yes'").err)

	t.Run("infinite loop", func(t *testing.T) {
		require.Nil(t, h.code(sb.ID, "python", "before = 1").err)
		o := h.code(sb.ID, "python", "while True: pass")
		require.NotNil(t, o.err)
		assert.Equal(t, "TimeoutError", o.err.EName)
		assert.NotContains(t, o.err.EValue, "restarted")
		// The loop got a TimeoutError; the context kept its state.
		o = h.code(sb.ID, "python", "'before' in dir()")
		require.Nil(t, o.err)
		assert.Equal(t, "True", o.results[0]["text"])
		o = h.code(sb.ID, "javascript", "while(true){}")
		require.NotNil(t, o.err)
		assert.Equal(t, "TimeoutError", o.err.EName)
		assert.Nil(t, h.code(sb.ID, "javascript", "1").err)
	})
	t.Run("memory bomb", func(t *testing.T) {
		o := h.code(sb.ID, "python", "x = bytearray(1024**3)")
		require.NotNil(t, o.err)
		assert.Contains(t, o.err.EName+o.err.EValue, "Memory")
		o = h.code(sb.ID, "python", "print(1 + 1)")
		require.Nil(t, o.err)
		assert.Equal(t, "2\n", strings.Join(o.stdout, ""))
		o = h.code(sb.ID, "javascript", "let a = []; while (true) a.push(new Array(1e6).fill(1));")
		require.NotNil(t, o.err)
		assert.Nil(t, h.code(sb.ID, "javascript", "2").err)
	})
	t.Run("output flood", func(t *testing.T) {
		o := h.code(sb.ID, "python", "while True: print('x' * 1000)")
		require.NotNil(t, o.err)
		assert.Equal(t, "OutputLimitExceeded", o.err.EName)
		total := 0
		for _, s := range o.stdout {
			total += len(s)
		}
		assert.LessOrEqual(t, total, 1<<20)
		c := h.command(sb.ID, "yes "+strings.Repeat("x", 1000))
		require.NotNil(t, c.err)
		assert.Contains(t, strings.Join(c.err.Traceback, " "), "output limit")
	})
	t.Run("busy context", func(t *testing.T) {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.code(sb.ID, "python", "import time; time.sleep(1)")
		}()
		time.Sleep(300 * time.Millisecond)
		st, b := h.execd(sb.ID, "POST", "/code", map[string]any{"context": map[string]string{"language": "python"}, "code": "1"})
		assert.Equal(t, http.StatusConflict, st, string(b))
		assert.Contains(t, string(b), execd.CodeBusy)
		wg.Wait()
	})
	// The other sandbox was not affected by any of it.
	o := h.code(other.ID, "python", "kept")
	require.Nil(t, o.err)
	assert.Equal(t, "'yes'", o.results[0]["text"])
}

func TestCommands(t *testing.T) {
	h := newHarness(t, "", harnessOpts{})
	sb := h.create(map[string]any{"env": map[string]string{"GREETING": "hello"}})
	o := h.command(sb.ID, "echo $GREETING; echo two; echo err >&2; exit 3")
	assert.Equal(t, []string{"hello", "two"}, o.stdout)
	assert.Equal(t, []string{"err"}, o.stderr)
	require.NotNil(t, o.err)
	assert.Equal(t, "CommandExecError", o.err.EName)
	assert.Equal(t, "3", o.err.EValue)

	o = h.command(sb.ID, "python3 -c 'print(6*7)'")
	require.Nil(t, o.err, "%+v", o)
	assert.Equal(t, []string{"42"}, o.stdout)
	o = h.command(sb.ID, "node -e 'console.log([1,2].length)'")
	require.Nil(t, o.err, "%+v", o)
	assert.Equal(t, []string{"2"}, o.stdout)
	o = h.command(sb.ID, "gcc --version")
	require.NotNil(t, o.err)
	assert.Equal(t, "127", o.err.EValue)
	assert.Contains(t, strings.Join(o.stderr, "\n"), "--runtime runc")
	assert.Contains(t, strings.Join(o.stderr, "\n"), `extensions {"hybox.io/runtime":"runc"}`)

	// Background: status and logs by cursor.
	st, b := h.execd(sb.ID, "POST", "/command", map[string]any{"command": "echo one; sleep 0.3; echo two", "background": true})
	require.Equal(t, 200, st)
	evs := events(t, b)
	require.Equal(t, execd.EventInit, evs[0].Type)
	id := evs[0].Text
	var status struct {
		Running  bool `json:"running"`
		ExitCode *int `json:"exit_code"`
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, b = h.execd(sb.ID, "GET", "/command/status/"+id, nil)
		require.Equal(t, 200, st, string(b))
		require.NoError(t, json.Unmarshal(b, &status))
		if !status.Running || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.False(t, status.Running)
	require.NotNil(t, status.ExitCode)
	assert.Equal(t, 0, *status.ExitCode)
	logs, cursor := h.logs(sb.ID, id, "")
	assert.Equal(t, "one\ntwo\n", logs)
	logs, cursor2 := h.logs(sb.ID, id, cursor)
	assert.Empty(t, logs)
	assert.Equal(t, cursor, cursor2)

	// Interrupt a long background command.
	st, b = h.execd(sb.ID, "POST", "/command", map[string]any{"command": "sleep 100", "background": true})
	require.Equal(t, 200, st)
	id = events(t, b)[0].Text
	st, _ = h.execd(sb.ID, "DELETE", "/command?id="+id, nil)
	require.Equal(t, 200, st)
	require.Eventually(t, func() bool {
		_, b := h.execd(sb.ID, "GET", "/command/status/"+id, nil)
		return json.Unmarshal(b, &status) == nil && !status.Running
	}, 5*time.Second, 20*time.Millisecond)

	// Sessions keep cwd and variables.
	st, b = h.execd(sb.ID, "POST", "/session", nil)
	require.Equal(t, 200, st, string(b))
	var sess struct {
		SessionID string `json:"session_id"`
	}
	require.NoError(t, json.Unmarshal(b, &sess))
	for _, c := range []string{"mkdir -p /tmp/s && cd /tmp/s", "X=5"} {
		st, b = h.execd(sb.ID, "POST", "/session/"+sess.SessionID+"/run", map[string]string{"command": c})
		require.Equal(t, 200, st)
		require.Nil(t, summarise(t, b).err)
	}
	st, b = h.execd(sb.ID, "POST", "/session/"+sess.SessionID+"/run", map[string]string{"command": "pwd; echo $X"})
	require.Equal(t, 200, st)
	assert.Equal(t, []string{"/tmp/s", "5"}, summarise(t, b).stdout)
	// A run's own cwd holds for that run only, even when it cds; its
	// variables and exit status are kept; a cwd that does not exist fails
	// the run and leaves the session as it was.
	st, b = h.execd(sb.ID, "POST", "/session/"+sess.SessionID+"/run", map[string]string{"command": "pwd; cd /; Y=7; (exit 3)", "cwd": "/workspace"})
	require.Equal(t, 200, st)
	out := summarise(t, b)
	assert.Equal(t, []string{"/workspace"}, out.stdout)
	require.NotNil(t, out.err)
	assert.Equal(t, "3", out.err.EValue)
	st, b = h.execd(sb.ID, "POST", "/session/"+sess.SessionID+"/run", map[string]string{"command": "pwd", "cwd": "/no/such/dir"})
	require.Equal(t, 200, st)
	require.NotNil(t, summarise(t, b).err)
	st, b = h.execd(sb.ID, "POST", "/session/"+sess.SessionID+"/run", map[string]string{"command": "pwd; echo $X$Y"})
	require.Equal(t, 200, st)
	assert.Equal(t, []string{"/tmp/s", "57"}, summarise(t, b).stdout)
	st, _ = h.execd(sb.ID, "DELETE", "/session/"+sess.SessionID, nil)
	assert.Equal(t, 200, st)
}

func (h *harness) logs(id, cmd, cursor string) (string, string) {
	h.t.Helper()
	q := ""
	if cursor != "" {
		q = "?cursor=" + cursor
	}
	st, b, _ := h.do("GET", "/v1/sandboxes/"+id+"/endpoints/44772", nil)
	require.Equal(h.t, 200, st)
	var ep api.Endpoint
	require.NoError(h.t, json.Unmarshal(b, &ep))
	host := strings.TrimPrefix(h.ts.URL, "http://")
	st, body, hdr := h.do("GET", strings.TrimPrefix(ep.Endpoint, host)+"/command/"+cmd+"/logs"+q, nil)
	require.Equal(h.t, 200, st)
	return string(body), hdr.Get("EXECD-COMMANDS-TAIL-CURSOR")
}

func TestFilesThroughProxy(t *testing.T) {
	h := newHarness(t, "", harnessOpts{})
	sb := h.create(nil)
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	meta, _ := mw.CreateFormField("metadata")
	_, _ = meta.Write([]byte(`{"path":"/workspace/dir/up.txt","mode":644}`))
	fw, _ := mw.CreateFormFile("file", "up.txt")
	_, _ = fw.Write([]byte("uploaded"))
	require.NoError(t, mw.Close())
	st, b, _ := h.do("POST", "/v1/sandboxes/"+sb.ID+"/proxy/44772/files/upload", buf.Bytes(), "Content-Type", mw.FormDataContentType())
	require.Equal(t, 200, st, string(b))
	o := h.code(sb.ID, "python", "open('/workspace/dir/up.txt').read()")
	require.Nil(t, o.err)
	assert.Equal(t, "'uploaded'", o.results[0]["text"])

	// Escapes are refused whatever the route. (The sandbox has an /etc of
	// its own, without a shadow file; the host's has one.)
	for _, p := range []string{"/../../etc/shadow", "/workspace/../../../etc/shadow"} {
		st, b = h.execd(sb.ID, "GET", "/files/download?path="+p, nil)
		assert.Contains(t, []int{400, 404}, st, "%s: %s", p, b)
		assert.NotContains(t, string(b), "root:")
	}
	o = h.command(sb.ID, "cat /../../etc/shadow")
	assert.NotNil(t, o.err)
	assert.NotContains(t, strings.Join(o.stdout, "\n"), "root:")
	o = h.code(sb.ID, "python", "open('/../../etc/shadow').read()")
	require.NotNil(t, o.err)
	assert.Contains(t, []string{"FileNotFoundError", "PermissionError"}, o.err.EName)
}

func TestConcurrentExecutions(t *testing.T) {
	limiter := execd.NewLimiter(8, 200*time.Millisecond)
	h := newHarness(t, "", harnessOpts{limiter: limiter})
	sbs := []api.Sandbox{h.create(nil), h.create(nil), h.create(nil), h.create(nil)}
	// Warm one JS and one Python context per sandbox.
	for _, sb := range sbs {
		require.Nil(t, h.code(sb.ID, "javascript", "0").err)
	}
	const n = 200
	var (
		wg                   sync.WaitGroup
		mu                   sync.Mutex
		ok, overloaded, busy int
		other                []string
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sb := sbs[i%len(sbs)]
			st, b := h.execd(sb.ID, "POST", "/command", map[string]any{"command": fmt.Sprintf("echo %d", i)})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case st == 200 && strings.Contains(string(b), fmt.Sprintf(`"text":"%d"`, i)):
				ok++
			case st == 429 && strings.Contains(string(b), string(execd.CodeOverloaded)):
				overloaded++
			case st == 409:
				busy++
			default:
				other = append(other, fmt.Sprintf("%d %s", st, b))
			}
		}(i)
	}
	wg.Wait()
	t.Logf("200 concurrent commands: %d ok, %d refused with 429", ok, overloaded)
	assert.Empty(t, other, "every answer is a result or a clear 429")
	assert.Equal(t, n, ok+overloaded)
	assert.Positive(t, ok)
	assert.Zero(t, limiter.InUse(), "every slot was released")
	// The server is still up and serving.
	assert.Equal(t, []string{"fine"}, h.command(sbs[0].ID, "echo fine").stdout)
}

func TestResourceLimitsMemory(t *testing.T) {
	h := newHarness(t, "", harnessOpts{})
	small := h.create(map[string]any{"resourceLimits": map[string]string{"memory": "64Mi", "cpu": "500m"}})
	big := h.create(map[string]any{"resourceLimits": map[string]string{"memory": "512Mi"}})
	const alloc = "x = bytearray(100 * 1024 * 1024); len(x)"
	o := h.code(small.ID, "python", alloc)
	require.NotNil(t, o.err, "a 100 MiB allocation must fail under a 64 MiB limit")
	assert.Equal(t, "MemoryError", o.err.EName)
	o = h.code(big.ID, "python", alloc)
	require.Nil(t, o.err)
	assert.Equal(t, "104857600", o.results[0]["text"])
	// Real clocks and randomness.
	o = h.code(big.ID, "python", "import time, os; (abs(time.time() - "+fmt.Sprint(time.Now().Unix())+") < 300, os.urandom(8) != os.urandom(8))")
	require.Nil(t, o.err)
	assert.Equal(t, "(True, True)", o.results[0]["text"])
	o = h.code(big.ID, "javascript", "Math.abs(Date.now()/1000 - "+fmt.Sprint(time.Now().Unix())+") < 300 && Math.random() !== Math.random()")
	require.Nil(t, o.err)
	assert.Equal(t, "true", o.results[0]["text"])
}
