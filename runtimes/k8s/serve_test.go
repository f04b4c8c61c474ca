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
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hybox-dev/hybox/runtimes/k8s"
	"github.com/hybox-dev/hybox/runtimes/k8s/k8stest"
	"github.com/hybox-dev/hybox/runtimes/oci/ocitest"
)

// TestServeKubernetes: `hybox serve` with [kubernetes] runs container
// sandboxes as Pods of the cluster: a create of runc answers with a
// sandbox whose commands run in its Pod, a runtime the configuration does
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
	execdImage := env.ExecdImage(t)
	repo := ocitest.RepoRoot()
	guests := filepath.Join(repo, "build", "guests")
	if _, err := os.Stat(filepath.Join(guests, "quickjs.wasm")); err != nil {
		t.Fatalf("no wasm guests in %s (make guests builds them): %v", guests, err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "hybox")
	build := exec.Command("go", "build", "-o", bin, "./cmd/hybox")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/hybox: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	const key = "k8s-serve-test"
	conf := filepath.Join(dir, "hybox.toml")
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
unenforced_egress = true
`, addr, filepath.Join(dir, "data"), key, extra, guests, env.Kubeconfig, k8stest.Namespace, execdImage)
	if err := os.WriteFile(conf, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	base := "http://" + addr
	var srv *exec.Cmd
	stop := func() {
		_ = srv.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = srv.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-srv.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	start := func() {
		t.Helper()
		srv = exec.Command(bin, "serve", "--config", conf)
		srv.Stdout, srv.Stderr = &log, &log
		srv.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(2 * time.Minute)
		for {
			if resp, err := http.Get(base + "/health"); err == nil {
				resp.Body.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the server did not answer /health:\n%s", log.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	start()
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("server log:\n%s", log.String())
		}
	})
	do = func(method, path, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("OPEN-SANDBOX-API-KEY", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	restart = func() {
		t.Helper()
		stop()
		start()
	}
	return do, restart
}
