package main

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// buildStatic builds this command with CGO_ENABLED=0 and checks that the
// result has no program interpreter (it is static).
func buildStatic(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "hybox-execd")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatal("hybox-execd is dynamically linked")
		}
	}
	return bin
}

// startDaemon starts bin with args, stops it when the test ends, and
// waits until its unix socket sock accepts connections. exited yields
// the process's end once; out holds its stdout and stderr.
func startDaemon(t *testing.T, bin, sock string, args ...string) (cmd *exec.Cmd, exited chan error, out *bytes.Buffer) {
	t.Helper()
	out = &bytes.Buffer{}
	cmd = exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited = make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return cmd, exited, out
		}
		if time.Now().After(deadline) {
			t.Fatalf("socket never appeared\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// unixClient talks HTTP over the unix socket sock.
func unixClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// events reads a command or code stream into its events.
func events(t *testing.T, r io.Reader) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("bad event %q: %v", line, err)
		}
		out = append(out, ev)
	}
	return out
}

func TestDaemon(t *testing.T) {
	bin := buildStatic(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "run", "execd.sock")
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	tcp := freePort(t)
	marker := filepath.Join(dir, "entry-got-term")
	cmd, exited, stderr := startDaemon(t, bin, sock, "--listen-unix", sock, "--listen-tcp", tcp, "--root", root,
		"--access-token-file", tokenFile, "--subreaper", "--stop-grace", "5s",
		"--", "sh", "-c", "trap 'touch "+marker+"; exit 0' TERM; echo entrypoint-up; while :; do sleep 0.1; done")
	client := unixClient(sock)
	do := func(method, path, body string, token bool) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, "http://execd"+path, strings.NewReader(body))
		if token {
			req.Header.Set("X-EXECD-ACCESS-TOKEN", "s3cret")
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", method, path, err, stderr.String())
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}

	if resp := do("GET", "/ping", "", false); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("ping without token: %d", resp.StatusCode)
	}
	if resp := do("GET", "/ping", "", true); resp.StatusCode != http.StatusOK {
		t.Fatalf("ping: %d", resp.StatusCode)
	}
	// TCP answers too.
	req, _ := http.NewRequest("GET", "http://"+tcp+"/ping", nil)
	req.Header.Set("X-EXECD-ACCESS-TOKEN", "s3cret")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("tcp ping: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// A command whose orphan must be reaped by the daemon.
	evs := events(t, do("POST", "/command", `{"command":"echo hello; (sleep 0.2 &); echo $PWD"}`, true).Body)
	var lines []string
	for _, ev := range evs {
		if ev["type"] == "stdout" {
			lines = append(lines, ev["text"].(string))
		}
	}
	if last := evs[len(evs)-1]["type"]; len(lines) != 2 || lines[0] != "hello" || last != "execution_complete" {
		t.Fatalf("command events %v", evs)
	}

	if _, err := exec.LookPath("python3"); err == nil {
		evs := events(t, do("POST", "/code", `{"context":{"language":"python"},"code":"x = 20\nx * 2 + 2"}`, true).Body)
		found := false
		for _, ev := range evs {
			if ev["type"] == "result" {
				found = ev["results"].(map[string]any)["text"] == "42"
			}
		}
		if !found {
			t.Fatalf("code events %v", evs)
		}
	}

	// No zombie children: orphans were reaped.
	time.Sleep(500 * time.Millisecond)
	if z := zombieChildren(cmd.Process.Pid); len(z) > 0 {
		t.Fatalf("zombie children of hybox-execd: %v", z)
	}

	// SIGTERM: forwarded to the entrypoint, then a clean exit.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("no exit after SIGTERM\n%s", stderr.String())
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("entrypoint did not get SIGTERM: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "entrypoint-up") {
		t.Fatalf("entrypoint output missing:\n%s", stderr.String())
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}
}

// zombieChildren lists the zombie children of pid.
func zombieChildren(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", n))
		if err != nil {
			continue
		}
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[0] == "Z" && f[1] == strconv.Itoa(pid) {
			out = append(out, n)
		}
	}
	return out
}

func TestFlags(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		wantErr bool
		entry   []string
	}{
		{name: "defaults", args: nil},
		{name: "entrypoint after --", args: []string{"--listen-tcp", "", "--", "sleep", "--flag"}, entry: []string{"sleep", "--flag"}},
		{name: "nothing to listen on", args: []string{"--listen-tcp", "", "--listen-unix", ""}, wantErr: true},
		{name: "unknown flag", args: []string{"--bogus"}, wantErr: true},
		{name: "pooled on the unix socket", args: []string{"--pooled", "--listen-tcp", ""}},
		{name: "pooled on TCP behind a token", args: []string{"--pooled", "--listen-unix", "", "--access-token-file", "/t"}},
		{name: "pooled on TCP without a token", args: []string{"--pooled", "--listen-unix", ""}, wantErr: true},
		{name: "pooled with an entrypoint", args: []string{"--pooled", "--", "sleep"}, wantErr: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := parseFlags(c.args, io.Discard)
			if (err != nil) != c.wantErr {
				t.Fatalf("err %v", err)
			}
			if err == nil && strings.Join(cfg.entrypoint, " ") != strings.Join(c.entry, " ") {
				t.Fatalf("entrypoint %q", cfg.entrypoint)
			}
		})
	}
}

// TestInstallTo: the init container of a Kubernetes sandbox copies the
// binary into a shared volume with --install-to; the copy is the same
// executable and runs.
func TestInstallTo(t *testing.T) {
	bin := buildStatic(t)
	dst := filepath.Join(t.TempDir(), "shared", "bin", "hybox-execd")
	if out, err := exec.Command(bin, "--install-to", dst).CombinedOutput(); err != nil {
		t.Fatalf("--install-to: %v\n%s", err, out)
	}
	want, _ := os.ReadFile(bin)
	got, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the copy differs from the binary (err %v)", err)
	}
	st, _ := os.Stat(dst)
	if st.Mode().Perm() != 0o755 {
		t.Fatalf("mode %v, want 0755", st.Mode().Perm())
	}
	out, _ := exec.Command(dst, "--help").CombinedOutput()
	if !strings.Contains(string(out), "-install-to") {
		t.Fatalf("the copy does not run: %s", out)
	}
}
