package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/execd"
)

// A --pooled daemon serves its unix socket only, starts nothing, and is
// claimed once: reserve, then personalise (env for every later process
// and the entrypoint, files, TCP listeners).
func TestPooledDaemonClaim(t *testing.T) {
	bin := buildStatic(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "run", "execd.sock")
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	tcp := freePort(t)
	_, _, stderr := startDaemon(t, bin, sock, "--pooled", "--listen-unix", sock, "--listen-tcp", tcp, "--listen-interpreter", "",
		"--root", root, "--subreaper")
	client := unixClient(sock)
	do := func(method, path string, body any) (int, string) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, "http://execd"+path, rd)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", method, path, err, stderr.String())
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	state := func() string {
		t.Helper()
		st, b := do("GET", execd.ClaimPath, nil)
		var s execd.ClaimStatus
		if st != 200 || json.Unmarshal([]byte(b), &s) != nil {
			t.Fatalf("claim state: %d %s", st, b)
		}
		return s.State
	}
	if s := state(); s != execd.ClaimIdle {
		t.Fatalf("state %q before the claim, want idle", s)
	}
	if c, err := net.Dial("tcp", tcp); err == nil {
		c.Close()
		t.Fatal("a pooled daemon listens on TCP before it is claimed")
	}
	// Personalising without reserving first is refused.
	if st, b := do("POST", execd.ClaimPath, execd.ClaimRequest{}); st != http.StatusConflict {
		t.Fatalf("claim without begin: %d %s", st, b)
	}
	if st, b := do("POST", execd.ClaimBeginPath, nil); st != http.StatusNoContent {
		t.Fatalf("begin: %d %s", st, b)
	}
	if st, _ := do("POST", execd.ClaimBeginPath, nil); st != http.StatusConflict {
		t.Fatalf("a second begin: %d, want 409", st)
	}
	if s := state(); s != execd.ClaimClaiming {
		t.Fatalf("state %q after begin", s)
	}
	marker := filepath.Join(dir, "entry")
	st, b := do("POST", execd.ClaimPath, execd.ClaimRequest{
		Env:        map[string]string{"GREETING": "claimed"},
		Files:      []execd.ClaimFile{{Path: filepath.Join(dir, "etc", "claimed.txt"), Data: []byte("file\n")}},
		Entrypoint: []string{"sh", "-c", "echo $GREETING > " + marker + "; exec sleep 60"},
	})
	if st != http.StatusNoContent {
		t.Fatalf("claim: %d %s\n%s", st, b, stderr.String())
	}
	if s := state(); s != execd.ClaimClaimed {
		t.Fatalf("state %q after the claim", s)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "etc", "claimed.txt")); err != nil || string(got) != "file\n" {
		t.Fatalf("claim file: %q %v", got, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _ := os.ReadFile(marker)
		if string(got) == "claimed\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the entrypoint did not run with the claim's env (marker %q)\n%s", got, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Commands get the claim's environment, over TCP too now.
	resp, err := http.Post("http://"+tcp+"/command", "application/json", strings.NewReader(`{"command":"echo $GREETING"}`))
	if err != nil {
		t.Fatalf("tcp after the claim: %v", err)
	}
	defer resp.Body.Close()
	var out []string
	for _, ev := range events(t, resp.Body) {
		if ev["type"] == "stdout" {
			out = append(out, ev["text"].(string))
		}
	}
	if len(out) != 1 || out[0] != "claimed" {
		t.Fatalf("command output %v, want [claimed]", out)
	}
	// Claimed once: no second claim.
	if st, _ := do("POST", execd.ClaimBeginPath, nil); st != http.StatusConflict {
		t.Fatalf("begin after the claim: %d, want 409", st)
	}
}

// A daemon that was never pooled reports itself claimed and refuses a claim.
func TestUnpooledDaemonRefusesClaim(t *testing.T) {
	cl := &claimer{state: execd.ClaimClaimed, personalise: func(execd.ClaimRequest) error {
		t.Fatal("personalised")
		return nil
	}}
	h := cl.routes(http.NotFoundHandler())
	for _, p := range []string{execd.ClaimBeginPath, execd.ClaimPath} {
		rec := httptest.NewRecorder()
		req, _ := http.NewRequest("POST", p, strings.NewReader("{}"))
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusConflict {
			t.Fatalf("POST %s: %d %s", p, rec.Code, rec.Body.String())
		}
	}
}

// Claims over TCP (a Pod's daemon, which has no unix socket) need the
// daemon's access token, like every other route there.
func TestClaimRoutesNeedToken(t *testing.T) {
	personalised := 0
	cl := &claimer{state: execd.ClaimIdle, token: "secret", personalise: func(execd.ClaimRequest) error {
		personalised++
		return nil
	}}
	h := cl.routes(http.NotFoundHandler())
	cases := []struct {
		name, method, path, token string
		want                      int
	}{
		{"state without a token", "GET", execd.ClaimPath, "", http.StatusUnauthorized},
		{"begin without a token", "POST", execd.ClaimBeginPath, "", http.StatusUnauthorized},
		{"begin with a wrong token", "POST", execd.ClaimBeginPath, "wrong", http.StatusUnauthorized},
		{"begin", "POST", execd.ClaimBeginPath, "secret", http.StatusNoContent},
		{"claim without a token", "POST", execd.ClaimPath, "", http.StatusUnauthorized},
		{"claim", "POST", execd.ClaimPath, "secret", http.StatusNoContent},
	}
	for _, c := range cases {
		rec := httptest.NewRecorder()
		req, _ := http.NewRequest(c.method, c.path, strings.NewReader("{}"))
		if c.token != "" {
			req.Header.Set(execd.AccessTokenHeader, c.token)
		}
		h.ServeHTTP(rec, req)
		if rec.Code != c.want {
			t.Fatalf("%s: %d %s, want %d", c.name, rec.Code, rec.Body.String(), c.want)
		}
	}
	if personalised != 1 || cl.state != execd.ClaimClaimed {
		t.Fatalf("personalised %d times, state %s; want once, claimed", personalised, cl.state)
	}
}
