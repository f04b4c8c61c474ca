package osbackend_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/execd/osbackend"
)

func newServer(t *testing.T) *httptest.Server {
	t.Helper()
	b, err := osbackend.New(osbackend.Options{RootDir: t.TempDir(), Env: os.Environ()})
	if err != nil {
		t.Fatal(err)
	}
	h, err := execd.New(execd.Options{Executor: b})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		h.Close()
		b.Close()
	})
	return srv
}

type event struct {
	Type    string            `json:"type"`
	Text    string            `json:"text"`
	Results map[string]string `json:"results"`
	Error   *execd.ExecError  `json:"error"`
	at      time.Time
}

func post(t *testing.T, srv *httptest.Server, path, body string) []event {
	t.Helper()
	resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
	}
	var evs []event
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("event %q: %v", sc.Text(), err)
		}
		ev.at = time.Now()
		evs = append(evs, ev)
	}
	return evs
}

func TestHandlerCommandStream(t *testing.T) {
	srv := newServer(t)
	evs := post(t, srv, "/command", `{"command":"echo one; sleep 0.4; echo two >&2; exit 3"}`)
	var types []string
	var one, last event
	for _, ev := range evs {
		types = append(types, ev.Type+":"+ev.Text)
		if ev.Text == "one" {
			one = ev
		}
		last = ev
	}
	if one.Type != "stdout" || last.Type != "error" || last.Error.EValue != "3" {
		t.Fatalf("events %v", types)
	}
	if last.at.Sub(one.at) < 300*time.Millisecond {
		t.Fatalf("stdout was not streamed before the end: %v", types)
	}
}

func TestHandlerBackgroundCommand(t *testing.T) {
	srv := newServer(t)
	evs := post(t, srv, "/command", `{"command":"echo a; sleep 0.3; echo b","background":true}`)
	id := evs[0].Text
	if evs[0].Type != "init" || id == "" {
		t.Fatalf("events %+v", evs)
	}
	var status struct {
		Running  bool `json:"running"`
		ExitCode *int `json:"exit_code"`
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(srv.URL + "/command/status/" + id)
		if err != nil {
			t.Fatal(err)
		}
		_ = json.NewDecoder(resp.Body).Decode(&status)
		resp.Body.Close()
		if !status.Running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("background command never finished")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if status.ExitCode == nil || *status.ExitCode != 0 {
		t.Fatalf("status %+v", status)
	}
	resp, err := http.Get(srv.URL + "/command/" + id + "/logs?cursor=2")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "b\n" || resp.Header.Get("EXECD-COMMANDS-TAIL-CURSOR") != "4" {
		t.Fatalf("logs %q cursor %q", body, resp.Header.Get("EXECD-COMMANDS-TAIL-CURSOR"))
	}
}

func TestHandlerSessionAndCode(t *testing.T) {
	srv := newServer(t)
	resp, err := http.Post(srv.URL+"/session", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	var sess struct {
		SessionID string `json:"session_id"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&sess)
	resp.Body.Close()
	post(t, srv, "/session/"+sess.SessionID+"/run", `{"command":"V=kept"}`)
	evs := post(t, srv, "/session/"+sess.SessionID+"/run", `{"command":"echo $V"}`)
	if evs[1].Type != "stdout" || evs[1].Text != "kept" {
		t.Fatalf("session events %+v", evs)
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not installed")
	}
	post(t, srv, "/code", `{"context":{"language":"python"},"code":"n = 6"}`)
	evs = post(t, srv, "/code", `{"context":{"language":"python"},"code":"print('x'); n * 7"}`)
	var got []string
	for _, ev := range evs {
		got = append(got, ev.Type+":"+ev.Text+ev.Results["text"])
	}
	if !strings.Contains(strings.Join(got, ","), "stdout:x") || !strings.Contains(strings.Join(got, ","), "result:42") {
		t.Fatalf("code events %v", got)
	}
}
