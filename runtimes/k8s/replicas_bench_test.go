package k8s_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

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
