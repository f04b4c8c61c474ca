package k8s_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hybox-dev/hybox/runtimes/k8s"
	"github.com/hybox-dev/hybox/runtimes/k8s/k8stest"
)

// BenchmarkReplicaFirstAnswer: two `hybox serve` replicas sharing the
// cluster's state. Each iteration makes a runc Pod sandbox through one
// (untimed) and times the first command through the other, which has
// never seen it and adopts it (record from the API server, Pod and token
// found, execd pinged): what a request pays at the surviving replica after
// the one that made the sandbox is killed. Then a second command there
// (the steady cost of a shared sandbox's request). Reports p50 and p90.
//
//	go test -trimpath ./runtimes/k8s -run '^$' -bench ReplicaFirstAnswer -benchtime 10x
func BenchmarkReplicaFirstAnswer(b *testing.B) {
	env := k8stest.Cluster(b)
	execdImage := env.ExecdImage(b)
	image := env.Image(b)
	_, guests := hyboxBinary(b)
	dir := b.TempDir()
	const key = "k8s-replicas-bench"
	addrA, addrB := freeAddr(b), freeAddr(b)
	a := startServe(b, dir, "a", addrA, key, replicaConfig(env, execdImage, guests, "bench-a", addrA, filepath.Join(dir, "a"), key))
	other := startServe(b, dir, "b", addrB, key, replicaConfig(env, execdImage, guests, "bench-b", addrB, filepath.Join(dir, "b"), key))
	command := func(p *serveProc, id string) time.Duration {
		begin := time.Now()
		st, body := p.do("POST", "/v1/sandboxes/"+id+"/proxy/44772/command", `{"command":"echo hi"}`)
		d := time.Since(begin)
		if st != http.StatusOK || !bytes.Contains(body, []byte("hi")) {
			b.Fatalf("command: %d %s", st, body)
		}
		return d
	}
	var first, steady []time.Duration
	for b.Loop() {
		b.StopTimer()
		st, body := a.do("POST", "/v1/sandboxes", fmt.Sprintf(`{"image":{"uri":%q},"entrypoint":["sleep","infinity"],"extensions":{"hybox.io/runtime":"runc"},"timeout":600}`, image))
		if st != http.StatusAccepted {
			b.Fatalf("create: %d %s", st, body)
		}
		var sb struct{ ID string }
		if err := json.Unmarshal(body, &sb); err != nil {
			b.Fatal(err)
		}
		command(a, sb.ID)
		b.StartTimer()
		first = append(first, command(other, sb.ID))
		steady = append(steady, command(other, sb.ID))
		b.StopTimer()
		if st, body := a.do("DELETE", "/v1/sandboxes/"+sb.ID, ""); st != http.StatusNoContent {
			b.Fatalf("delete: %d %s", st, body)
		}
		b.StartTimer()
	}
	b.ReportMetric(pct(first, 50), "adopt-first-p50-ms")
	b.ReportMetric(pct(first, 90), "adopt-first-p90-ms")
	b.ReportMetric(pct(steady, 50), "steady-p50-ms")
}

// BenchmarkReplicaPoolClaim: a pool shared by two `hybox serve` replicas;
// each iteration waits (untimed) until the pool has an idle member, which
// the leader made, and times a create with poolRef through the replica
// that does not lead (it finds the member in the store and restores it
// before the claim) to the result of its first command there. Reports
// p50, p90 and p99.
//
//	go test -trimpath ./runtimes/k8s -run '^$' -bench ReplicaPoolClaim -benchtime 30x
func BenchmarkReplicaPoolClaim(b *testing.B) {
	env := k8stest.Cluster(b)
	execdImage := env.ExecdImage(b)
	image := env.Image(b)
	_, guests := hyboxBinary(b)
	dir := b.TempDir()
	const key = "k8s-replica-pool-bench"
	addrA, addrB := freeAddr(b), freeAddr(b)
	procs := map[string]*serveProc{
		"bench-pool-a": startServe(b, dir, "a", addrA, key, replicaConfig(env, execdImage, guests, "bench-pool-a", addrA, filepath.Join(dir, "a"), key)),
		"bench-pool-b": startServe(b, dir, "b", addrB, key, replicaConfig(env, execdImage, guests, "bench-pool-b", addrB, filepath.Join(dir, "b"), key)),
	}
	// The replica that does not lead claims.
	lead := waitLeader(b, env, procs, "")
	var claimer *serveProc
	for name, p := range procs {
		if name != lead {
			claimer = p
		}
	}
	if st, body := claimer.do("POST", "/v1/pools", fmt.Sprintf(`{"name":"bench-shared","template":{"image":{"uri":%q},"runtime":"runc","resourceLimits":{"memory":"128Mi"}},
		"capacitySpec":{"bufferMin":2,"bufferMax":2,"poolMin":0,"poolMax":8}}`, image)); st != http.StatusCreated {
		b.Fatalf("create the pool: %d %s", st, body)
	}
	b.Cleanup(func() { claimer.do("DELETE", "/v1/pools/bench-shared", "") })
	var first []time.Duration
	for b.Loop() {
		b.StopTimer()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			_, body := claimer.do("GET", "/v1/pools/bench-shared", "")
			var p struct{ Status struct{ Available int } }
			if json.Unmarshal(body, &p) == nil && p.Status.Available > 0 {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("the pool has no idle member: %s", body)
			}
			time.Sleep(100 * time.Millisecond)
		}
		b.StartTimer()
		begin := time.Now()
		st, body := claimer.do("POST", "/v1/sandboxes", fmt.Sprintf(`{"image":{"uri":%q},"extensions":{"poolRef":"bench-shared"},"resourceLimits":{"memory":"128Mi"},"entrypoint":["sleep","infinity"],"timeout":600}`, image))
		var sb struct{ ID string }
		if st != http.StatusAccepted || json.Unmarshal(body, &sb) != nil {
			b.Fatalf("create: %d %s", st, body)
		}
		st, body = claimer.do("POST", "/v1/sandboxes/"+sb.ID+"/proxy/44772/command", `{"command":"echo hi"}`)
		first = append(first, time.Since(begin))
		b.StopTimer()
		if st != http.StatusOK || !bytes.Contains(body, []byte("hi")) {
			b.Fatalf("command: %d %s", st, body)
		}
		pod, err := env.Client.CoreV1().Pods(k8stest.Namespace).Get(context.Background(), "hybox-"+sb.ID, metav1.GetOptions{})
		if err != nil || pod.Labels[k8s.LabelPool] != k8s.PoolClaimed {
			b.Fatalf("sandbox %s was not claimed from the pool (Pod %v, err %v)", sb.ID, pod.Labels, err)
		}
		if st, body := claimer.do("DELETE", "/v1/sandboxes/"+sb.ID, ""); st != http.StatusNoContent {
			b.Fatalf("delete: %d %s", st, body)
		}
		b.StartTimer()
	}
	b.ReportMetric(pct(first, 50), "claim-first-p50-ms")
	b.ReportMetric(pct(first, 90), "claim-first-p90-ms")
	b.ReportMetric(pct(first, 99), "claim-first-p99-ms")
}
