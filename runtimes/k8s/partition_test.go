package k8s_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
)

// cutRelay relays TCP to the API server until cut: then it ends every
// connection it carries and refuses new ones, until restored.
type cutRelay struct {
	addr  string
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func newCutRelay(t *testing.T, apiserver string) *cutRelay {
	t.Helper()
	l, err := net.Listen("tcp", nodeIP+":0")
	if err != nil {
		t.Fatalf("relay on the node's address: %v", err)
	}
	r := &cutRelay{addr: l.Addr().String()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			if r.cut {
				r.mu.Unlock()
				c.Close()
				continue
			}
			up, err := net.Dial("tcp", apiserver)
			if err != nil {
				r.mu.Unlock()
				c.Close()
				continue
			}
			r.conns = append(r.conns, c, up)
			r.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		r.setCut(true)
	})
	return r
}

// setCut cuts the relay (ending what it carries) or restores it.
func (r *cutRelay) setCut(cut bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut = cut
	if cut {
		for _, c := range r.conns {
			c.Close()
		}
		r.conns = nil
	}
}

// TestReplicasTakeOverPartition: a replica cut off from the API server
// (its connections through a relay the test cuts) while a cell of one of
// its wasm sandboxes runs, writing a file every 50 ms. When its heartbeat
// lapses it stops the sandbox, cell and all, before the other replica can
// take it over; the other takes it over with the variable saved before;
// nothing writes the file any more; and once the first reaches the API
// server again it forgets the sandbox and forwards to the new owner,
// never answering from its old instance.
func TestReplicasTakeOverPartition(t *testing.T) {
	fx := newReplicaFixture(t)
	env, execdImage, guests := fx.env, fx.execdImage, fx.guests
	dir := t.TempDir()
	shared := filepath.Join(dir, "shared")
	const key = "k8s-partition-test"

	// a reaches the API server through the relay only.
	relay := newCutRelay(t, strings.TrimPrefix(env.Config.Host, "https://"))
	kc, err := clientcmd.LoadFromFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range kc.Clusters {
		c.Server = "https://" + relay.addr
	}
	relayed := filepath.Join(dir, "relayed.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, relayed); err != nil {
		t.Fatal(err)
	}
	conf := func(name, addr, kubeconfig string) string {
		c := replicaConfig(env, execdImage, guests, name, addr, filepath.Join(dir, name), key)
		c = strings.Replace(c, "shared_state = true\n", fmt.Sprintf("shared_state = true\nshared_dir = %q\n", shared), 1)
		return strings.Replace(c, fmt.Sprintf("kubeconfig = %q", env.Kubeconfig), fmt.Sprintf("kubeconfig = %q", kubeconfig), 1)
	}
	addrA, addrB := freeAddr(t), freeAddr(t)
	a := startServe(t, dir, "a", addrA, key, conf("replica-a", addrA, relayed))
	b := startServe(t, dir, "b", addrB, key, conf("replica-b", addrB, env.Kubeconfig))

	st, body := a.do("POST", "/v1/sandboxes", `{"image":{"uri":"wasm://default"},"timeout":600}`)
	if st != http.StatusAccepted {
		t.Fatalf("create: %d %s", st, body)
	}
	id := jsonID(t, body)
	t.Cleanup(func() { _ = deleteSandboxRecord(fx, id) })
	code := func(p *serveProc, src string) (int, []byte) {
		return p.do("POST", "/v1/sandboxes/"+id+"/proxy/44772/code", fmt.Sprintf(`{"context":{"language":"python"},"code":%q}`, src))
	}
	if st, body := code(a, "x = 41"); st != http.StatusOK || !bytes.Contains(body, []byte("execution_complete")) {
		t.Fatalf("x = 41: %d %s", st, body)
	}
	// x is saved a moment after its cell (what a takeover restores).
	waitSaved(t, shared, "replica-a", id, 1)
	deadline := time.Now().Add(time.Minute)
	tickPath := func(owner string) string {
		return filepath.Join(shared, "replicas", owner, "sandboxes", id, "fs", "workspace", "tick")
	}
	tick := func(owner string) string {
		b, _ := os.ReadFile(tickPath(owner))
		return string(b)
	}
	// The ticking cell, through a, which holds the sandbox.
	ended := make(chan []byte, 1)
	go func() {
		_, body := code(a, "import time\nfor i in range(10**6):\n    open('/workspace/tick', 'w').write(str(i))\n    time.sleep(0.05)")
		ended <- body
	}()
	for tick("replica-a") == "" {
		if time.Now().After(deadline) {
			t.Fatal("the cell does not tick")
		}
		time.Sleep(20 * time.Millisecond)
	}

	relay.setCut(true)
	select {
	case body := <-ended:
		if bytes.Contains(body, []byte("execution_complete")) {
			t.Fatalf("the ticking cell completed: %s", body)
		}
	case <-time.After(time.Minute):
		t.Fatal("replica a did not stop its sandbox's cell when its heartbeat lapsed")
	}
	for {
		st, body := code(b, "x + 1")
		if st == http.StatusOK && bytes.Contains(body, []byte(`"text":"42"`)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b did not take the sandbox over: %d %s", st, body)
		}
		time.Sleep(250 * time.Millisecond)
	}
	// The file moved (it may be empty: the cell can be stopped between
	// open's truncation and its write).
	if _, err := os.Stat(tickPath("replica-b")); err != nil {
		t.Fatalf("the tick file did not move with the sandbox: %v", err)
	}
	first := tick("replica-b")
	time.Sleep(500 * time.Millisecond)
	if again := tick("replica-b"); again != first {
		t.Fatalf("something still writes the sandbox's file after the takeover: %q, then %q", first, again)
	}
	if st, body := code(b, "x = 100"); st != http.StatusOK {
		t.Fatalf("x = 100 at b: %d %s", st, body)
	}

	// a reaches the API server again: a 503 until it has checked, then
	// the new owner's answers, never its old instance's.
	relay.setCut(false)
	untilNewOwner(t, func() (int, []byte) { return code(a, "x") }, `"text":"41"`, `"text":"100"`)
	if st, body := a.do("DELETE", "/v1/sandboxes/"+id, ""); st != http.StatusNoContent {
		t.Fatalf("delete through a: %d %s", st, body)
	}
	if left, _ := os.ReadDir(filepath.Join(shared, "replicas", "replica-a", "sandboxes")); len(left) != 0 {
		t.Errorf("left in a's part of the shared directory: %v", left)
	}
}

// jsonID is the id in a create's answer.
func jsonID(t *testing.T, body []byte) string {
	t.Helper()
	var sb struct{ ID string }
	if err := json.Unmarshal(body, &sb); err != nil || sb.ID == "" {
		t.Fatalf("no id in %s (%v)", body, err)
	}
	return sb.ID
}

// deleteSandboxRecord removes what a test that failed half-way may leave
// of sandbox id in the cluster: its record and its egress Secret.
func deleteSandboxRecord(fx *replicaFixture, id string) error {
	ctx := context.Background()
	return errors.Join(fx.crs.Delete(ctx, id, metav1.DeleteOptions{}), fx.secrets.Delete(ctx, "hybox-egress-"+id, metav1.DeleteOptions{}))
}
