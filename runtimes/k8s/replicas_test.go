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
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/hybox-dev/hybox/runtimes/k8s"
	"github.com/hybox-dev/hybox/runtimes/k8s/k8stest"
)

// replicaConfig is the configuration of one of several servers that share
// the cluster's state.
func replicaConfig(env *k8stest.Env, execdImage, guests, name, addr, dataDir, key string) string {
	// Every replica seals vaults with the same key.
	vaultKey := filepath.Join(filepath.Dir(dataDir), "vault.key")
	if err := os.WriteFile(vaultKey, []byte(strings.Repeat("5a", 32)), 0o600); err != nil {
		panic(err)
	}
	return fmt.Sprintf(`addr = %q
data_dir = %q
api_key = %q
reap_interval = "1s"

[wasm]
guest_dir = %q
python_ready = 1

[kubernetes]
enabled = true
kubeconfig = %q
namespace = %q
execd_image = %q
shared_state = true
replica = %q
lease_duration = "3s"

[vault]
key_file = %q
`, addr, dataDir, key, guests, env.Kubeconfig, k8stest.Namespace, execdImage, name, vaultKey)
}

// replicaFixture is what the tests of several replicas share: the test
// cluster, hybox-execd's image, the guests, and the cluster's Sandbox
// resources, Secrets and Leases in the test namespace; the leader's Lease
// and the route key's Secret go at cleanup.
type replicaFixture struct {
	env        *k8stest.Env
	execdImage string
	guests     string
	crs        dynamic.ResourceInterface
	secrets    corev1client.SecretInterface
	leases     coordinationv1client.LeaseInterface
}

func newReplicaFixture(t *testing.T) *replicaFixture {
	t.Helper()
	env := k8stest.Cluster(t)
	f := &replicaFixture{env: env, execdImage: env.ExecdImage(t)}
	_, f.guests = hyboxBinary(t)
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	f.crs = dyn.Resource(k8s.SandboxGVR).Namespace(k8stest.Namespace)
	f.secrets = env.Client.CoreV1().Secrets(k8stest.Namespace)
	f.leases = env.Client.CoordinationV1().Leases(k8stest.Namespace)
	t.Cleanup(func() {
		_ = f.leases.Delete(context.Background(), k8s.LeaseName, metav1.DeleteOptions{})
		_ = f.secrets.Delete(context.Background(), "hybox-key-route", metav1.DeleteOptions{})
	})
	return f
}

// TestReplicas: two `hybox serve` processes with kubernetes.shared_state
// serve the same Pod sandboxes, and forward requests for a wasm sandbox to
// the replica that holds it (which reports it lost while that replica is
// gone). A sandbox made by one is listed, read and
// commanded through the other (which adopts it); a route token signed by
// one is honoured by the other; the records are Sandbox resources of the
// cluster with their state; after kill -9 of the first, the second serves
// every sandbox, including one it had never touched, takes the lead and
// reaps a sandbox that expires, and removes the Pod a third replica,
// killed in the middle of a create, left without a record; the first, started again, serves them
// too, and a delete through it is seen by the second; nothing is left.
func TestReplicas(t *testing.T) {
	f := newReplicaFixture(t)
	env, execdImage, guests, crs, leases := f.env, f.execdImage, f.guests, f.crs, f.leases
	image := env.Image(t)
	ctx := context.Background()

	dir := t.TempDir()
	const key = "k8s-replicas-test"
	addrA, addrB := freeAddr(t), freeAddr(t)
	confA := replicaConfig(env, execdImage, guests, "replica-a", addrA, filepath.Join(dir, "a"), key)
	a := startServe(t, dir, "a", addrA, key, confA)
	b := startServe(t, dir, "b", addrB, key, replicaConfig(env, execdImage, guests, "replica-b", addrB, filepath.Join(dir, "b"), key))

	create := func(p *serveProc) string {
		t.Helper()
		st, body := p.do("POST", "/v1/sandboxes", fmt.Sprintf(`{"image":{"uri":%q},"entrypoint":["sleep","infinity"],"extensions":{"hybox.io/runtime":"runc"},"timeout":600}`, image))
		if st != http.StatusAccepted {
			t.Fatalf("create: %d %s", st, body)
		}
		var sb struct{ ID string }
		if err := json.Unmarshal(body, &sb); err != nil {
			t.Fatal(err)
		}
		return sb.ID
	}
	command := func(p *serveProc, id, word string, hdr ...string) {
		t.Helper()
		st, body := p.do("POST", "/v1/sandboxes/"+id+"/proxy/44772/command", fmt.Sprintf(`{"command":"echo %s"}`, word), hdr...)
		if st != http.StatusOK || !bytes.Contains(body, []byte(word)) {
			t.Fatalf("command %q in %s: %d %s", word, id, st, body)
		}
	}
	state := func(p *serveProc, id string) (int, string) {
		t.Helper()
		st, body := p.do("GET", "/v1/sandboxes/"+id, "")
		var sb struct{ Status struct{ State string } }
		_ = json.Unmarshal(body, &sb)
		return st, sb.Status.State
	}

	one := create(a)
	two := create(a) // not touched by b until a is gone
	st, body := a.do("POST", "/v1/sandboxes", `{"image":{"uri":"wasm://default"},"timeout":600}`)
	if st != http.StatusAccepted {
		t.Fatalf("create a wasm sandbox: %d %s", st, body)
	}
	var wsb struct{ ID string }
	if err := json.Unmarshal(body, &wsb); err != nil {
		t.Fatal(err)
	}
	wasm := wsb.ID
	// b forwards everything about the wasm sandbox to a, which holds it.
	command(b, wasm, "wasm-through-b")
	if st, s := state(b, wasm); st != http.StatusOK || s != "Running" {
		t.Fatalf("GET of a's wasm sandbox through b: %d %q, want 200 Running", st, s)
	}
	if st, s := state(b, one); st != http.StatusOK || s != "Running" {
		t.Fatalf("GET through the other replica: %d %q, want 200 Running", st, s)
	}
	st, body = b.do("GET", "/v1/sandboxes", "")
	if st != http.StatusOK || !bytes.Contains(body, []byte(one)) || !bytes.Contains(body, []byte(two)) || !bytes.Contains(body, []byte(wasm)) {
		t.Fatalf("list through the other replica: %d %s", st, body)
	}
	command(b, one, "through-b")
	command(a, one, "through-a")

	// A credential vault changed through both replicas keeps both changes
	// (each replica's controller is brought up to the store first).
	st, body = a.do("POST", "/v1/sandboxes", fmt.Sprintf(`{"image":{"uri":%q},"entrypoint":["sleep","infinity"],"extensions":{"hybox.io/runtime":"runc"},"timeout":600,`+
		`"networkPolicy":{"defaultAction":"deny","egress":[{"action":"allow","target":"api.example.com"}]},"credentialProxy":{"enabled":true}}`, image))
	if st != http.StatusAccepted {
		t.Fatalf("create with a vault: %d %s", st, body)
	}
	var vsb struct{ ID string }
	if err := json.Unmarshal(body, &vsb); err != nil {
		t.Fatal(err)
	}
	vault := "/v1/sandboxes/" + vsb.ID + "/proxy/18080/credential-vault"
	cred := func(name string) string {
		return fmt.Sprintf(`{"name":%q,"source":{"type":"inline","value":"secret-%s"}}`, name, name)
	}
	if st, body := a.do("POST", vault, `{"credentials":[`+cred("first")+`],"bindings":[{"name":"api","match":{"schemes":["https"],"ports":[443],"hosts":["api.example.com"]},"auth":{"type":"bearer","credential":"first"}}]}`); st != http.StatusCreated {
		t.Fatalf("create the vault through a: %d %s", st, body)
	}
	if st, body := b.do("PATCH", vault, `{"credentials":{"add":[`+cred("second")+`]}}`); st != http.StatusOK {
		t.Fatalf("add a credential through b: %d %s", st, body)
	}
	if st, body := a.do("PATCH", vault, `{"credentials":{"add":[`+cred("third")+`]}}`); st != http.StatusOK {
		t.Fatalf("add a credential through a again: %d %s", st, body)
	}
	for _, p := range []*serveProc{a, b} {
		st, body := p.do("GET", vault+"/credentials", "")
		if st != http.StatusOK || !bytes.Contains(body, []byte(`"first"`)) || !bytes.Contains(body, []byte(`"second"`)) || !bytes.Contains(body, []byte(`"third"`)) {
			t.Fatalf("the vault's credentials after changes through both replicas, read at %s: %d %s", p.base, st, body)
		}
	}
	if st, body := a.do("DELETE", "/v1/sandboxes/"+vsb.ID, ""); st != http.StatusNoContent {
		t.Fatalf("delete the vaulted sandbox: %d %s", st, body)
	}

	// The record is a Sandbox resource with the sandbox's state.
	cr, err := crs.Get(ctx, one, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the Sandbox resource of %s: %v", one, err)
	}
	if s, _, _ := unstructured.NestedString(cr.Object, "status", "state"); s != "Running" {
		t.Errorf("Sandbox %s status.state = %q, want Running", one, s)
	}
	if rt, _, _ := unstructured.NestedString(cr.Object, "spec", "runtime"); rt != "runc" {
		t.Errorf("Sandbox %s spec.runtime = %q, want runc", one, rt)
	}

	// A route token signed by a works on b: the key is shared.
	exp := time.Now().Add(10 * time.Minute).Unix()
	st, body = a.do("GET", fmt.Sprintf("/v1/sandboxes/%s/endpoints/44772?expires=%d", one, exp), "")
	var ep struct{ Headers map[string]string }
	if err := json.Unmarshal(body, &ep); st != http.StatusOK || err != nil || len(ep.Headers) == 0 {
		t.Fatalf("signed endpoint: %d %s", st, body)
	}
	for name, v := range ep.Headers {
		req, _ := http.NewRequest("POST", b.base+"/v1/sandboxes/"+one+"/proxy/44772/command", bytes.NewReader([]byte(`{"command":"echo routed"}`)))
		req.Header.Set(name, v)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got := new(bytes.Buffer)
		_, _ = got.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !bytes.Contains(got.Bytes(), []byte("routed")) {
			t.Fatalf("a route token of replica a at replica b: %d %s", resp.StatusCode, got)
		}
	}

	// kill -9 of a: b serves both, takes the lead and reaps.
	a.kill9()
	command(b, one, "after-the-crash")
	command(b, two, "never-touched-by-b")
	deadline := time.Now().Add(time.Minute)
	for {
		l, err := leases.Get(ctx, k8s.LeaseName, metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == "replica-b" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica b did not take the lead after replica a's crash (lease %v, err %v)", l, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// a's wasm sandbox is reported lost (not missing) once a's heartbeat
	// has lapsed.
	for {
		st, body := b.do("GET", "/v1/sandboxes/"+wasm, "")
		if st == http.StatusOK && bytes.Contains(body, []byte(`"OwnerLost"`)) && bytes.Contains(body, []byte(`"Failed"`)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a's wasm sandbox after a's crash, at b: %d %s, want Failed OwnerLost", st, body)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if st, body := b.do("POST", "/v1/sandboxes/"+wasm+"/proxy/44772/command", `{"command":"echo lost"}`); st != http.StatusServiceUnavailable || !bytes.Contains(body, []byte("replica-a")) {
		t.Errorf("a command in the lost wasm sandbox: %d %s, want 503 naming replica-a", st, body)
	}
	// A replica killed in the middle of a create (its Pod made, no record
	// yet): the leader removes that Pod once the replica's heartbeat lapses.
	addrC := freeAddr(t)
	c := startServeEnv(t, dir, "c", addrC, key, replicaConfig(env, execdImage, guests, "replica-c", addrC, filepath.Join(dir, "c"), key),
		"HYBOX_TEST_FAILPOINT=created-before-record")
	req, _ := http.NewRequest("POST", c.base+"/v1/sandboxes", strings.NewReader(fmt.Sprintf(`{"image":{"uri":%q},"entrypoint":["sleep","infinity"],"extensions":{"hybox.io/runtime":"runc"},"timeout":600}`, image)))
	req.Header.Set("OPEN-SANDBOX-API-KEY", key)
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the create at the failpoint answered %d; the server should have died", resp.StatusCode)
	}
	<-c.done
	halfMade := func() []string {
		l, err := env.Client.CoreV1().Pods(k8stest.Namespace).List(ctx, metav1.ListOptions{LabelSelector: k8s.LabelManagedBy + "=hybox"})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range l.Items {
			if p.Annotations[k8s.AnnotationReplica] == "replica-c" {
				out = append(out, p.Name)
			}
		}
		return out
	}
	if left := halfMade(); len(left) != 1 {
		t.Fatalf("Pods replica c made before it died: %v, want 1", left)
	}
	for len(halfMade()) > 0 {
		if time.Now().After(deadline.Add(time.Minute)) {
			t.Fatalf("the leader did not remove the Pod a dead replica left without a record: %v", halfMade())
		}
		time.Sleep(500 * time.Millisecond)
	}

	three := create(b)
	st, body = b.do("POST", "/v1/sandboxes/"+three+"/renew-expiration",
		fmt.Sprintf(`{"expiresAt":%q}`, time.Now().Add(2*time.Second).UTC().Format(time.RFC3339Nano)))
	if st != http.StatusOK {
		t.Fatalf("renew to expire soon: %d %s", st, body)
	}
	for {
		st, _ := state(b, three)
		if st == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline.Add(time.Minute)) {
			t.Fatalf("the leading replica did not reap expired sandbox %s (GET %d)", three, st)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if _, err := crs.Get(ctx, three, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Sandbox resource of reaped %s: %v, want not found", three, err)
	}

	// a again (same data directory): it serves b's sandboxes; a delete
	// through it is seen by b.
	a = startServe(t, dir, "a2", addrA, key, confA)
	command(a, two, "a-again")
	// a holds its wasm sandbox again, and b forwards to it again.
	if st, s := state(b, wasm); st != http.StatusOK || s != "Running" {
		t.Errorf("a's wasm sandbox after a's restart, at b: %d %q, want Running", st, s)
	}
	command(b, wasm, "wasm-again")
	if st, body := b.do("DELETE", "/v1/sandboxes/"+wasm, ""); st != http.StatusNoContent {
		t.Fatalf("delete of a's wasm sandbox through b: %d %s", st, body)
	}
	if st, _ := state(a, wasm); st != http.StatusNotFound {
		t.Errorf("a's wasm sandbox after its delete through b: GET at a %d, want 404", st)
	}
	if st, body := a.do("DELETE", "/v1/sandboxes/"+two, ""); st != http.StatusNoContent {
		t.Fatalf("delete through a: %d %s", st, body)
	}
	if st, _ := state(b, two); st != http.StatusNotFound {
		t.Errorf("b after a's delete: GET %d, want 404", st)
	}
	if st, body := b.do("POST", "/v1/sandboxes/"+two+"/proxy/44772/command", `{"command":"echo gone"}`); st != http.StatusNotFound {
		t.Errorf("b after a's delete: command %d %s, want 404", st, body)
	}
	if st, body := b.do("DELETE", "/v1/sandboxes/"+one, ""); st != http.StatusNoContent {
		t.Fatalf("delete through b: %d %s", st, body)
	}

	// Nothing is left: no Sandbox resources, and no Pods these replicas made.
	for {
		l, err := crs.List(ctx, metav1.ListOptions{})
		pods, perr := env.Client.CoreV1().Pods(k8stest.Namespace).List(ctx, metav1.ListOptions{LabelSelector: k8s.LabelManagedBy + "=hybox"})
		ours := 0
		if perr == nil {
			for _, p := range pods.Items {
				if strings.HasPrefix(p.Annotations[k8s.AnnotationReplica], "replica-") {
					ours++
				}
			}
		}
		if err == nil && perr == nil && len(l.Items) == 0 && ours == 0 {
			break
		}
		if time.Now().After(deadline.Add(2 * time.Minute)) {
			t.Fatalf("left behind: Sandboxes %v (err %v), Pods %v (err %v)", l, err, pods, perr)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
