package k8s_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/hybox-dev/hybox/runtimes/k8s"
	"github.com/hybox-dev/hybox/runtimes/k8s/k8stest"
)

// TestReplicaPools: a warm pool of Pods shared by two `hybox serve`
// replicas. A pool made through one is served by the other; only the
// leading replica starts members; creates through both replicas at once
// claim every idle member exactly once (the losers of a race try the next
// member, or are served cold) and every sandbox answers; both replicas
// report the same counts, and the leader refills; after kill -9 of the
// leader the other takes the lead and starts members itself; the pool
// deleted through it takes every member with it; nothing is left.
func TestReplicaPools(t *testing.T) {
	env := k8stest.Cluster(t)
	execdImage := env.ExecdImage(t)
	image := env.Image(t)
	_, guests := hyboxBinary(t)
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	crs := dyn.Resource(k8s.SandboxGVR).Namespace(k8stest.Namespace)
	pools := dyn.Resource(k8s.PoolGVR).Namespace(k8stest.Namespace)
	pods := env.Client.CoreV1().Pods(k8stest.Namespace)
	leases := env.Client.CoordinationV1().Leases(k8stest.Namespace)
	t.Cleanup(func() {
		_ = leases.Delete(ctx, k8s.LeaseName, metav1.DeleteOptions{})
		_ = env.Client.CoreV1().Secrets(k8stest.Namespace).Delete(ctx, "hybox-key-route", metav1.DeleteOptions{})
	})

	dir := t.TempDir()
	const key = "k8s-replica-pools-test"
	addrA, addrB := freeAddr(t), freeAddr(t)
	procs := map[string]*serveProc{
		"replica-a": startServe(t, dir, "a", addrA, key, replicaConfig(env, execdImage, guests, "replica-a", addrA, filepath.Join(dir, "a"), key)),
		"replica-b": startServe(t, dir, "b", addrB, key, replicaConfig(env, execdImage, guests, "replica-b", addrB, filepath.Join(dir, "b"), key)),
	}
	leader := func(not string) string {
		t.Helper()
		return waitLeader(t, env, procs, not)
	}
	lead := leader("")
	other := "replica-a"
	if lead == other {
		other = "replica-b"
	}
	t.Logf("%s leads", lead)

	type status struct{ Total, Allocated, Available, Starting int }
	getPool := func(p *serveProc) (int, status) {
		t.Helper()
		st, b := p.do("GET", "/v1/pools/shared-runc", "")
		var out struct{ Status status }
		_ = json.Unmarshal(b, &out)
		return st, out.Status
	}
	waitIdle := func(p *serveProc, n, allocated int) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute)
		for {
			st, s := getPool(p)
			if st == http.StatusOK && s.Available == n && s.Starting == 0 && s.Allocated == allocated {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the pool at %s never had %d idle members and %d allocated: %d %+v", p.base, n, allocated, st, s)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// idle lists the pool's idle member Pods by the replica that made them.
	idle := func() map[string][]string {
		t.Helper()
		l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: k8s.LabelPool + "=" + k8s.PoolIdle})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]string{}
		for _, p := range l.Items {
			if p.DeletionTimestamp == nil {
				id := p.Labels[k8s.LabelSandbox]
				out[p.Annotations[k8s.AnnotationReplica]] = append(out[p.Annotations[k8s.AnnotationReplica]], id)
			}
		}
		return out
	}

	// Made through the replica that does not lead; served by both.
	st, b := procs[other].do("POST", "/v1/pools", fmt.Sprintf(`{"name":"shared-runc","template":{"image":{"uri":%q},"runtime":"runc","resourceLimits":{"memory":"128Mi"}},
		"capacitySpec":{"bufferMin":2,"bufferMax":3,"poolMin":0,"poolMax":12}}`, image))
	if st != http.StatusCreated {
		t.Fatalf("create the pool through %s: %d %s", other, st, b)
	}
	deleted := false
	t.Cleanup(func() {
		if !deleted {
			for _, p := range procs {
				if st, _ := p.do("DELETE", "/v1/pools/shared-runc", ""); st == http.StatusNoContent {
					return
				}
			}
		}
	})
	if _, err := pools.Get(ctx, "shared-runc", metav1.GetOptions{}); err != nil {
		t.Fatalf("the SandboxPool resource: %v", err)
	}
	if st, b := procs[lead].do("POST", "/v1/pools", fmt.Sprintf(`{"name":"shared-runc","template":{"image":{"uri":%q},"runtime":"runc"},
		"capacitySpec":{"bufferMin":1,"bufferMax":1,"poolMin":0,"poolMax":1}}`, image)); st != http.StatusConflict {
		t.Errorf("the same pool made again through the other replica: %d %s, want 409", st, b)
	}
	waitIdle(procs[lead], 3, 0)
	waitIdle(procs[other], 3, 0)
	byMaker := idle()
	if len(byMaker) != 1 || len(byMaker[lead]) != 3 {
		t.Fatalf("idle member Pods by maker %v, want 3 made by the leader %s alone", byMaker, lead)
	}
	members := byMaker[lead]
	// Members are not sandboxes: neither replica lists them.
	for _, p := range procs {
		st, b := p.do("GET", "/v1/sandboxes", "")
		for _, m := range members {
			if st != http.StatusOK || strings.Contains(string(b), m) {
				t.Fatalf("the sandbox list at %s shows pool member %s: %d %s", p.base, m, st, b)
			}
		}
		if st, b := p.do("GET", "/v1/sandboxes/"+members[0], ""); st != http.StatusNotFound {
			t.Errorf("GET of a pool member's id at %s: %d %s, want 404", p.base, st, b)
		}
	}

	// Six creates at once, three through each replica, for three members.
	var (
		mu  sync.Mutex
		ids []string
		wg  sync.WaitGroup
	)
	for i := range 6 {
		p := procs[lead]
		if i%2 == 1 {
			p = procs[other]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", p.base+"/v1/sandboxes", strings.NewReader(fmt.Sprintf(
				`{"image":{"uri":%q},"extensions":{"poolRef":"shared-runc"},"resourceLimits":{"memory":"128Mi"},"env":{"N":"%d"},"entrypoint":["sleep","infinity"],"timeout":600}`, image, i)))
			req.Header.Set("OPEN-SANDBOX-API-KEY", key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("create %d: %v", i, err)
				return
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			var sb struct{ ID string }
			if resp.StatusCode != http.StatusAccepted || json.Unmarshal(body, &sb) != nil {
				t.Errorf("create %d through %s: %d %s", i, p.base, resp.StatusCode, body)
				return
			}
			mu.Lock()
			ids = append(ids, sb.ID)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	seen := map[string]int{}
	for _, id := range ids {
		seen[id]++
	}
	for _, m := range members {
		if seen[m] != 1 {
			t.Errorf("member %s was claimed %d times, want once (sandboxes %v)", m, seen[m], ids)
		}
	}
	if len(seen) != 6 {
		t.Errorf("sandboxes %v: want six distinct ones", ids)
	}
	claimed := 0
	for i, id := range ids {
		p := procs[lead]
		if i%2 == 1 {
			p = procs[other]
		}
		st, b := p.do("POST", "/v1/sandboxes/"+id+"/proxy/44772/command", `{"command":"echo n=$N"}`)
		if st != http.StatusOK || !strings.Contains(string(b), "n=") {
			t.Errorf("command in %s: %d %s", id, st, b)
		}
		if pod, err := pods.Get(ctx, "hybox-"+id, metav1.GetOptions{}); err == nil && pod.Labels[k8s.LabelPool] == k8s.PoolClaimed {
			claimed++
		}
	}
	if claimed < 3 {
		t.Errorf("%d of the sandboxes came from the pool, want at least its 3 members", claimed)
	}
	// Both replicas count the claims; the leader refills.
	waitIdle(procs[lead], 3, claimed)
	waitIdle(procs[other], 3, claimed)

	// kill -9 of the leader: the other leads and starts members itself.
	procs[lead].kill9()
	dead := lead
	delete(procs, dead)
	if got := leader(dead); got != other {
		t.Fatalf("after %s's crash %s leads, want %s", dead, got, other)
	}
	survivor := procs[other]
	for _, id := range ids[:3] {
		if st, b := survivor.do("DELETE", "/v1/sandboxes/"+id, ""); st != http.StatusNoContent {
			t.Fatalf("delete %s through the survivor: %d %s", id, st, b)
		}
	}
	// Drain the idle members made by the dead leader: the survivor refills.
	for i := range 3 {
		st, b := survivor.do("POST", "/v1/sandboxes", fmt.Sprintf(
			`{"image":{"uri":%q},"extensions":{"poolRef":"shared-runc"},"resourceLimits":{"memory":"128Mi"},"entrypoint":["sleep","infinity"],"timeout":600}`, image))
		var sb struct{ ID string }
		if st != http.StatusAccepted || json.Unmarshal(b, &sb) != nil {
			t.Fatalf("create %d after the crash: %d %s", i, st, b)
		}
		ids = append(ids, sb.ID)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for len(idle()[other]) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the new leader %s started no member: idle Pods by maker %v", other, idle())
		}
		time.Sleep(250 * time.Millisecond)
	}

	// Deleting the pool takes every member, whoever made it.
	if st, b := survivor.do("DELETE", "/v1/pools/shared-runc", ""); st != http.StatusNoContent {
		t.Fatalf("delete the pool: %d %s", st, b)
	}
	deleted = true
	for _, id := range ids[3:] {
		if st, b := survivor.do("DELETE", "/v1/sandboxes/"+id, ""); st != http.StatusNoContent {
			t.Errorf("delete %s: %d %s", id, st, b)
		}
	}
	deadline = time.Now().Add(2 * time.Minute)
	for {
		ml, err := crs.List(ctx, metav1.ListOptions{LabelSelector: k8s.LabelPoolMember})
		if err != nil {
			t.Fatal(err)
		}
		var left []string
		for _, m := range ml.Items {
			left = append(left, "member "+m.GetName())
		}
		for _, id := range ids {
			if _, err := crs.Get(ctx, id, metav1.GetOptions{}); err == nil {
				left = append(left, "Sandbox "+id)
			}
		}
		pl, err := pods.List(ctx, metav1.ListOptions{LabelSelector: k8s.LabelManagedBy + "=hybox"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pl.Items {
			if m := p.Annotations[k8s.AnnotationReplica]; m == "replica-a" || m == "replica-b" {
				left = append(left, "Pod "+p.Name)
			}
		}
		if _, err := pools.Get(ctx, "shared-runc", metav1.GetOptions{}); err == nil {
			left = append(left, "SandboxPool shared-runc")
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			slices.Sort(left)
			t.Fatalf("left after the pool and its sandboxes were deleted: %v", left)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitLeader waits (a minute at most) until one of procs other than not
// holds the leader's Lease, and returns its name.
func waitLeader(t testing.TB, env *k8stest.Env, procs map[string]*serveProc, not string) string {
	t.Helper()
	leases := env.Client.CoordinationV1().Leases(k8stest.Namespace)
	deadline := time.Now().Add(time.Minute)
	for {
		l, err := leases.Get(context.Background(), k8s.LeaseName, metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil && procs[*l.Spec.HolderIdentity] != nil && *l.Spec.HolderIdentity != not {
			return *l.Spec.HolderIdentity
		}
		if time.Now().After(deadline) {
			t.Fatalf("no replica but %q leads (lease %v, err %v)", not, l, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
