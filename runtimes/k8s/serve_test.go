package k8s_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hybox-dev/hybox/runtimes/k8s"
	"github.com/hybox-dev/hybox/runtimes/k8s/k8stest"
	"github.com/hybox-dev/hybox/runtimes/oci/ocitest"
)

// hyboxBin is the hybox binary the serve tests start (built once).
var hyboxBin struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

// hyboxBinary builds ./cmd/hybox once per test binary and checks that the
// wasm guests are built.
func hyboxBinary(t testing.TB) (bin, guests string) {
	t.Helper()
	repo := ocitest.RepoRoot()
	guests = filepath.Join(repo, "build", "guests")
	if _, err := os.Stat(filepath.Join(guests, "quickjs.wasm")); err != nil {
		t.Fatalf("no wasm guests in %s (make guests builds them): %v", guests, err)
	}
	hyboxBin.once.Do(func() {
		dir, err := os.MkdirTemp("", "hybox-k8s-bin-")
		if err != nil {
			hyboxBin.err = err
			return
		}
		hyboxBin.path = filepath.Join(dir, "hybox")
		build := exec.Command("go", "build", "-o", hyboxBin.path, "./cmd/hybox")
		build.Dir = repo
		hyboxBin.out, hyboxBin.err = build.CombinedOutput()
	})
	if hyboxBin.err != nil {
		t.Fatalf("go build ./cmd/hybox: %v\n%s", hyboxBin.err, hyboxBin.out)
	}
	return hyboxBin.path, guests
}

// serveProc is one `hybox serve` process of a test.
type serveProc struct {
	t    testing.TB
	base string
	key  string
	// client sends the requests; nil is http.DefaultClient.
	client *http.Client
	cmd    *exec.Cmd
	log    *logBuffer
	done   chan struct{}
	// restart starts the same configuration again (serveK8sProc).
	restart func()
}

// logBuffer is a server's output: written by the process's copying
// goroutines, read by the test while the server runs.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startServe starts `hybox serve` on addr with the configuration toml
// (written to dir/name.toml) and waits for its /health. The test's cleanup
// stops it (SIGTERM, then SIGKILL) and prints its log when the test failed.
func startServe(t testing.TB, dir, name, addr, key, toml string) *serveProc {
	t.Helper()
	return startServeEnv(t, dir, name, addr, key, toml)
}

// startServeEnv is startServe with extra environment variables (NAME=value).
func startServeEnv(t testing.TB, dir, name, addr, key, toml string, env ...string) *serveProc {
	t.Helper()
	bin, _ := hyboxBinary(t)
	conf := filepath.Join(dir, name+".toml")
	if err := os.WriteFile(conf, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &serveProc{t: t, base: "http://" + addr, key: key, log: &logBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, "serve", "--config", conf)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("log of server %s:\n%s", name, p.log.String())
		}
	})
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if resp, err := http.Get(p.base + "/health"); err == nil {
			resp.Body.Close()
			return p
		}
		select {
		case <-p.done:
			t.Fatalf("server %s exited before answering /health:\n%s", name, p.log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server %s did not answer /health:\n%s", name, p.log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop ends the server with SIGTERM (SIGKILL after 20 s) and waits.
func (p *serveProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// kill9 ends the server with SIGKILL, as a crash would, and waits.
func (p *serveProc) kill9() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// do sends one API request with the API key (and the extra headers hdr,
// name-value pairs) and returns the status and body.
func (p *serveProc) do(method, path, body string, hdr ...string) (int, []byte) {
	p.t.Helper()
	req, _ := http.NewRequest(method, p.base+path, strings.NewReader(body))
	req.Header.Set("OPEN-SANDBOX-API-KEY", p.key)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	client := p.client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		p.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestServeKubernetes: `hybox serve` with [kubernetes] runs container
// sandboxes as Pods of the cluster: a create of runc answers with a
// sandbox whose commands run in its Pod, a policy set through the server's
// egress API is in force in the Pod, a runtime the configuration does
// not map is a 400 naming those it has, wasm sandboxes are still served
// in-process, and a delete removes the Pod.
func TestServeKubernetes(t *testing.T) {
	env := k8stest.Cluster(t)
	image := env.Image(t)
	do, _ := serveK8s(t, env, "")
	deadline := time.Now().Add(2 * time.Minute)
	st, b := do("POST", "/v1/sandboxes", fmt.Sprintf(`{"image":{"uri":%q},"entrypoint":["sleep","infinity"],"extensions":{"hybox.io/runtime":"runc"},"timeout":600}`, image))
	if st != http.StatusAccepted {
		t.Fatalf("create: %d %s", st, b)
	}
	var sb struct{ ID string }
	if err := json.Unmarshal(b, &sb); err != nil {
		t.Fatal(err)
	}
	pods := env.Client.CoreV1().Pods(k8stest.Namespace)
	list, err := pods.List(context.Background(), metav1.ListOptions{LabelSelector: k8s.LabelSandbox + "=" + sb.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("%d Pods of sandbox %s, want 1", len(list.Items), sb.ID)
	}
	pod := list.Items[0].Name
	st, b = do("POST", "/v1/sandboxes/"+sb.ID+"/proxy/44772/command", `{"command":"echo from-the-pod; cat /proc/1/cgroup | head -1"}`)
	if st != http.StatusOK || !bytes.Contains(b, []byte("from-the-pod")) {
		t.Fatalf("command: %d %s", st, b)
	}

	// The egress API of the server reaches the Pod's agent: a policy set
	// on the unrestricted sandbox is in force in the Pod at once (the
	// kubelet on the node's address stands in for an upstream).
	probe := `{"command":"timeout 5 bash -c 'exec 3<>/dev/tcp/10.248.0.1/10450' && echo OPEN || echo SHUT"}`
	if st, b := do("POST", "/v1/sandboxes/"+sb.ID+"/proxy/44772/command", probe); st != http.StatusOK || !bytes.Contains(b, []byte("OPEN")) {
		t.Fatalf("unrestricted, the node is reachable: %d %s", st, b)
	}
	if st, b := do("PUT", "/v1/sandboxes/"+sb.ID+"/proxy/18080/policy", `{"defaultAction":"deny","egress":[]}`); st != http.StatusOK {
		t.Fatalf("PUT policy: %d %s", st, b)
	}
	if st, b := do("POST", "/v1/sandboxes/"+sb.ID+"/proxy/44772/command", probe); st != http.StatusOK || !bytes.Contains(b, []byte("SHUT")) {
		t.Fatalf("after a deny-all policy, the node is still reachable: %d %s", st, b)
	}

	st, b = do("POST", "/v1/sandboxes", fmt.Sprintf(`{"image":{"uri":%q},"extensions":{"hybox.io/runtime":"kata"}}`, image))
	if st != http.StatusBadRequest || !bytes.Contains(b, []byte("runc")) {
		t.Errorf("a runtime not configured: %d %s, want 400 naming runc", st, b)
	}
	st, b = do("POST", "/v1/sandboxes", `{"image":{"uri":"wasm://default"}}`)
	if st != http.StatusAccepted {
		t.Errorf("a wasm sandbox beside the Pods: %d %s", st, b)
	}

	if st, b := do("DELETE", "/v1/sandboxes/"+sb.ID, ""); st != http.StatusNoContent {
		t.Fatalf("delete: %d %s", st, b)
	}
	for {
		_, err := pods.Get(context.Background(), pod, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline.Add(time.Minute)) {
			t.Fatalf("Pod %s is still there after the delete (err %v)", pod, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// serveK8s starts the real hybox binary with [kubernetes] on the test
// cluster (unenforced egress, the cluster's execd image), with the
// top-level TOML settings extra, and returns a client of its API and a
// restart (SIGTERM, then the same configuration again); the server is
// stopped when t ends.
func serveK8s(t *testing.T, env *k8stest.Env, extra string) (do func(method, path, body string) (int, []byte), restart func()) {
	t.Helper()
	srv := serveK8sProc(t, env, extra, "")
	do = func(method, path, body string) (int, []byte) {
		t.Helper()
		return srv.do(method, path, body)
	}
	restart = func() {
		t.Helper()
		srv.stop()
		srv.restart()
	}
	return do, restart
}

// serveK8sProc is serveK8s's server, with the [kubernetes] settings kube
// added; restart starts its configuration again.
func serveK8sProc(t *testing.T, env *k8stest.Env, extra, kube string) *serveProc {
	t.Helper()
	execdImage := env.ExecdImage(t)
	_, guests := hyboxBinary(t)
	dir := t.TempDir()
	addr := freeAddr(t)
	const key = "k8s-serve-test"
	toml := fmt.Sprintf(`addr = %q
data_dir = %q
api_key = %q
%s
[wasm]
guest_dir = %q
python_ready = 1

[kubernetes]
enabled = true
kubeconfig = %q
namespace = %q
execd_image = %q
%s
`, addr, filepath.Join(dir, "data"), key, extra, guests, env.Kubeconfig, k8stest.Namespace, execdImage, kube)
	srv := startServe(t, dir, "hybox", addr, key, toml)
	var restart func()
	restart = func() {
		*srv = *startServe(t, dir, "hybox", addr, key, toml)
		srv.restart = restart
	}
	srv.restart = restart
	return srv
}
