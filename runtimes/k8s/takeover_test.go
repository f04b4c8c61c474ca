package k8s_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
)

// TestReplicasTakeOver: with kubernetes.shared_dir, a wasm sandbox whose
// replica is gone is taken over by another replica from what it saved in
// the shared directory, instead of being reported lost. Replica a holds
// two wasm sandboxes (one with a credential vault and a Python variable
// and a file, one paused); after kill -9 of a, replica b serves both: the
// variable, the file, the vault, the paused state; the record names b;
// the directory moved into b's part of the shared directory. a, started
// again, forgets them and forwards to b. A replica stopped (SIGSTOP) past
// its heartbeat's lease, whose sandbox b takes over meanwhile, never
// serves that sandbox's old instance when it runs again. The leader removes
// what a gone replica left in the shared directory without a record.
func TestReplicasTakeOver(t *testing.T) {
	fx := newReplicaFixture(t)
	env, execdImage, guests, crs, secrets := fx.env, fx.execdImage, fx.guests, fx.crs, fx.secrets
	ctx := context.Background()

	dir := t.TempDir()
	shared := filepath.Join(dir, "shared")
	const key = "k8s-takeover-test"
	withShared := func(name, addr string) string {
		c := replicaConfig(env, execdImage, guests, name, addr, filepath.Join(dir, name), key)
		return strings.Replace(c, "shared_state = true\n", fmt.Sprintf("shared_state = true\nshared_dir = %q\n", shared), 1)
	}
	addrA, addrB := freeAddr(t), freeAddr(t)
	confA := withShared("replica-a", addrA)
	a := startServe(t, dir, "a", addrA, key, confA)
	b := startServe(t, dir, "b", addrB, key, withShared("replica-b", addrB))

	createWasm := func(p *serveProc, extra string) string {
		t.Helper()
		st, body := p.do("POST", "/v1/sandboxes", `{"image":{"uri":"wasm://default"},"timeout":600`+extra+`}`)
		if st != http.StatusAccepted {
			t.Fatalf("create a wasm sandbox: %d %s", st, body)
		}
		var sb struct{ ID string }
		if err := json.Unmarshal(body, &sb); err != nil {
			t.Fatal(err)
		}
		// A run that fails half-way leaves no record for the next test.
		t.Cleanup(func() {
			_ = crs.Delete(context.Background(), sb.ID, metav1.DeleteOptions{})
			_ = secrets.Delete(context.Background(), "hybox-egress-"+sb.ID, metav1.DeleteOptions{})
		})
		return sb.ID
	}
	run := func(p *serveProc, id, code, want string) {
		t.Helper()
		st, body := p.do("POST", "/v1/sandboxes/"+id+"/proxy/44772/code", fmt.Sprintf(`{"context":{"language":"python"},"code":%q}`, code))
		if st != http.StatusOK || !bytes.Contains(body, []byte(want)) {
			t.Fatalf("run %q in %s at %s: %d %s, want %s", code, id, p.base, st, body, want)
		}
	}
	state := func(p *serveProc, id string) (int, string) {
		t.Helper()
		st, body := p.do("GET", "/v1/sandboxes/"+id, "")
		var sb struct{ Status struct{ State string } }
		_ = json.Unmarshal(body, &sb)
		return st, sb.Status.State
	}
	saved := func(owner, id string, count int) {
		t.Helper()
		waitSaved(t, shared, owner, id, count)
	}

	// w: a vault, a variable, a file; held by a, used through both.
	w := createWasm(a, `,"networkPolicy":{"defaultAction":"deny","egress":[{"action":"allow","target":"api.example.com"}]},"credentialProxy":{"enabled":true}`)
	vault := "/v1/sandboxes/" + w + "/proxy/18080/credential-vault"
	if st, body := b.do("POST", vault, `{"credentials":[{"name":"kept","source":{"type":"inline","value":"secret-kept"}}],"bindings":[{"name":"api","match":{"schemes":["https"],"ports":[443],"hosts":["api.example.com"]},"auth":{"type":"bearer","credential":"kept"}}]}`); st != http.StatusCreated {
		t.Fatalf("create the vault: %d %s", st, body)
	}
	if st, body := a.do("POST", "/v1/sandboxes/"+w+"/proxy/44772/command", `{"command":"echo kept > /workspace/note.txt"}`); st != http.StatusOK {
		t.Fatalf("write a file: %d %s", st, body)
	}
	run(a, w, "x = 41", "execution_complete")
	saved("replica-a", w, 1)
	// p: paused with a variable.
	p := createWasm(a, "")
	run(a, p, "y = 7", "execution_complete")
	if st, body := a.do("POST", "/v1/sandboxes/"+p+"/pause", ""); st != http.StatusAccepted {
		t.Fatalf("pause: %d %s", st, body)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if _, s := state(a, p); s == "Paused" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sandbox did not pause")
		}
		time.Sleep(50 * time.Millisecond)
	}

	// kill -9 of a: b takes both over on first use, once a's heartbeat
	// has lapsed (until then it forwards to a, which does not answer).
	a.kill9()
	for {
		start := time.Now()
		st, body := b.do("POST", "/v1/sandboxes/"+w+"/proxy/44772/command", `{"command":"cat /workspace/note.txt"}`)
		if st == http.StatusOK && bytes.Contains(body, []byte("kept")) {
			// For docs/benchmarks.md: the request that took it over.
			t.Logf("the takeover and its command took %v", time.Since(start))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a's sandbox after a's crash, at b: %d %s, want it taken over with its file", st, body)
		}
		time.Sleep(250 * time.Millisecond)
	}
	run(b, w, "x + 1", `"text":"42"`)
	st, body := b.do("GET", vault+"/credentials", "")
	if st != http.StatusOK || !bytes.Contains(body, []byte(`"kept"`)) {
		t.Errorf("the vault after the takeover: %d %s, want the credential kept", st, body)
	}
	if st, s := state(b, w); st != http.StatusOK || s != "Running" {
		t.Errorf("the sandbox taken over: %d %q, want Running", st, s)
	}
	cr, err := crs.Get(ctx, w, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if owner, _, _ := unstructured.NestedString(cr.Object, "spec", "owner"); owner != "replica-b" {
		t.Errorf("the record of the sandbox taken over names owner %q, want replica-b", owner)
	}
	if _, err := os.Stat(filepath.Join(shared, "replicas", "replica-b", "sandboxes", w)); err != nil {
		t.Errorf("the sandbox's directory in b's part of the shared directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(shared, "replicas", "replica-a", "sandboxes", w)); !os.IsNotExist(err) {
		t.Errorf("the sandbox's directory is still in a's part: %v", err)
	}
	if st, s := state(b, p); st != http.StatusOK || s != "Paused" {
		t.Errorf("the paused sandbox taken over: %d %q, want Paused", st, s)
	}
	if st, body := b.do("POST", "/v1/sandboxes/"+p+"/resume", ""); st != http.StatusAccepted {
		t.Fatalf("resume at b: %d %s", st, body)
	}
	run(b, p, "y * 6", `"text":"42"`)

	// a again: its records name b now, so it forgets them and forwards.
	a = startServe(t, dir, "a2", addrA, key, confA)
	run(a, w, "x = 100", "execution_complete")
	if st, s := state(a, w); st != http.StatusOK || s != "Running" {
		t.Errorf("the sandbox b took over, at a again: %d %q, want Running", st, s)
	}
	if !strings.Contains(a.log.String(), "forgetting a sandbox another replica took over") {
		t.Errorf("a did not say it forgot the sandboxes b took over; its log:\n%s", a.log.String())
	}

	// a sandbox of a's again, and a stopped past its lease: b takes it
	// over; a, running again, never answers from the old instance.
	f := createWasm(a, "")
	run(a, f, "z = 'old'", "execution_complete")
	saved("replica-a", f, 1)
	if err := syscall.Kill(a.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			_ = syscall.Kill(a.cmd.Process.Pid, syscall.SIGCONT)
		}
	}()
	deadline = time.Now().Add(time.Minute)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		req, _ := http.NewRequest("POST", b.base+"/v1/sandboxes/"+f+"/proxy/44772/code", strings.NewReader(`{"context":{"language":"python"},"code":"z = 'new'; z"}`))
		req.Header.Set("OPEN-SANDBOX-API-KEY", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err == nil {
			got := new(bytes.Buffer)
			_, _ = got.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && bytes.Contains(got.Bytes(), []byte(`'new'`)) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("b did not take over the sandbox of stopped replica a (last: %v)", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err := syscall.Kill(a.cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	// Whatever a answers now, it is not its old instance's 'old': a 503
	// until it has checked, then b's answer.
	untilNewOwner(t, func() (int, []byte) {
		return a.do("POST", "/v1/sandboxes/"+f+"/proxy/44772/code", `{"context":{"language":"python"},"code":"z"}`)
	}, `'old'`, `'new'`)

	// What a replica that is gone left in the shared directory without a
	// record is removed by the leader (b).
	orphan := filepath.Join(shared, "replicas", "replica-gone", "sandboxes", "0f8fad5b-d9cb-469f-a165-70867728950e")
	if err := os.MkdirAll(filepath.Join(orphan, "fs"), 0o755); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(2 * time.Minute)
	for {
		if _, err := os.Stat(filepath.Join(shared, "replicas", "replica-gone")); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the leader did not remove what a gone replica left in the shared directory")
		}
		time.Sleep(250 * time.Millisecond)
	}

	for _, id := range []string{w, p, f} {
		if st, body := a.do("DELETE", "/v1/sandboxes/"+id, ""); st != http.StatusNoContent {
			t.Fatalf("delete %s through a: %d %s", id, st, body)
		}
		if _, err := crs.Get(ctx, id, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the record of deleted %s: %v, want not found", id, err)
		}
		if _, err := secrets.Get(ctx, "hybox-egress-"+id, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the egress Secret of deleted %s: %v, want not found", id, err)
		}
	}
	for _, r := range []string{"replica-a", "replica-b"} {
		left, _ := os.ReadDir(filepath.Join(shared, "replicas", r, "sandboxes"))
		if len(left) != 0 {
			t.Errorf("left in %s's part of the shared directory: %v", r, left)
		}
	}
}

// waitSaved waits (at most a minute) until the default Python context of
// wasm sandbox id, held by replica owner in the shared directory, has been
// saved after its count-th execution (a moment after it).
func waitSaved(t *testing.T, shared, owner, id string, count int) {
	t.Helper()
	manifest := filepath.Join(shared, "replicas", owner, "sandboxes", id, "state", "contexts.state")
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := engine.ReadStateFile(manifest)
		if err == nil && strings.Contains(string(st.Host), fmt.Sprintf(`"count":%d`, count)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the context of %s was not saved in %s: %v", id, manifest, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// untilNewOwner asks (every 100 ms, at most a minute) a replica whose
// sandbox another replica has taken over: it must answer 503 until it has
// checked its ownership, then the new owner's answer (containing want),
// and never its old instance's (containing old).
func untilNewOwner(t *testing.T, ask func() (int, []byte), old, want string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		st, body := ask()
		if bytes.Contains(body, []byte(old)) {
			t.Fatalf("the old owner answered from its old instance: %d %s", st, body)
		}
		if st == http.StatusOK && bytes.Contains(body, []byte(want)) {
			return
		}
		if st != http.StatusServiceUnavailable {
			t.Fatalf("the old owner: %d %s, want 503 until it has checked, then the new owner's answer", st, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the old owner still answers 503: %s", body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
