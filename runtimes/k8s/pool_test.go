package k8s_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/runtimes/k8s"
	"github.com/hybox-dev/hybox/runtimes/k8s/k8stest"
)

// TestPool: a member Pod starts with no entrypoint and no user env,
// labelled idle; a claim personalises that same Pod (env, entrypoint,
// limits in place under runc), relabels it, and cannot be repeated; a
// claimed member is not restored as a member; under gVisor other limits
// are refused and the member's own are served.
func TestPool(t *testing.T) {
	c, env, image := cluster(t)
	ctx := context.Background()
	pods := env.Client.CoreV1().Pods(k8stest.Namespace)
	for _, rc := range []struct {
		name, class string
		updates     bool
	}{{"runc", "runc", true}, {"runsc", "gvisor", false}} {
		t.Run(rc.class, func(t *testing.T) {
			if !slices.Contains(env.Classes, rc.class) {
				t.Skipf("the test cluster has no RuntimeClass %s (it has %v)", rc.class, env.Classes)
			}
			rt := c.Runtime(rc.name, rc.class)
			if rt.UpdatesLimits() != rc.updates {
				t.Fatalf("UpdatesLimits %v, want %v", rt.UpdatesLimits(), rc.updates)
			}
			spec := runtimes.Spec{ID: "pool-" + suffix(), Image: image, MemoryBytes: 256 << 20}
			member, err := rt.Warm(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			// Cleanups run last first: destroyed, then checked gone.
			t.Cleanup(func() { assertGone(t, env, spec.ID) })
			destroyAtCleanup(t, rt, member, spec)
			before, err := pods.Get(ctx, "hybox-"+spec.ID, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if before.Labels[k8s.LabelPool] != k8s.PoolIdle {
				t.Errorf("member labels %v, want %s=%s", before.Labels, k8s.LabelPool, k8s.PoolIdle)
			}
			if got := command(t, member, "echo ${GREETING:-unset} $(for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done | grep -c '[s]leep')"); got != "unset 0" {
				t.Errorf("an idle member: %q, want no user env and no entrypoint", got)
			}
			// Restored as a member while idle.
			again, err := rt.RestoreWarm(ctx, spec)
			if err != nil {
				t.Fatalf("RestoreWarm of an idle member: %v", err)
			}
			_ = again.Close(ctx)

			claim := spec
			claim.Env = map[string]string{"GREETING": "claimed"}
			claim.Entrypoint = []string{"sh", "-c", "echo up-$GREETING > /tmp/entry; exec sleep infinity"}
			if !rc.updates {
				other := claim
				other.MemoryBytes = 300 << 20
				if err := rt.Claim(ctx, member, other); !errors.Is(err, runtimes.ErrNotSupported) {
					t.Fatalf("a claim with other limits under %s: %v, want ErrNotSupported", rc.class, err)
				}
			} else {
				claim.MemoryBytes, claim.CPUMillis = 300<<20, 500
			}
			if err := rt.Claim(ctx, member, claim); err != nil {
				t.Fatal(err)
			}
			after, err := pods.Get(ctx, "hybox-"+spec.ID, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if after.UID != before.UID {
				t.Errorf("the claim made a new Pod (uid %s, the member's %s)", after.UID, before.UID)
			}
			if after.Labels[k8s.LabelPool] != k8s.PoolClaimed {
				t.Errorf("claimed labels %v, want %s=%s", after.Labels, k8s.LabelPool, k8s.PoolClaimed)
			}
			if got := command(t, member, "echo $GREETING"); got != "claimed" {
				t.Errorf("env after the claim: %q", got)
			}
			deadline := time.Now().Add(30 * time.Second)
			for command(t, member, "cat /tmp/entry 2>/dev/null") != "up-claimed" {
				if time.Now().After(deadline) {
					t.Fatal("the entrypoint did not run with the claim's env")
				}
				time.Sleep(100 * time.Millisecond)
			}
			if rc.updates {
				mem := command(t, member, "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes")
				if mem != fmt.Sprint(300<<20) {
					t.Errorf("memory limit after the claim: %s, want %d", mem, 300<<20)
				}
				cpu := command(t, member, "cat /sys/fs/cgroup/cpu.max 2>/dev/null || cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us")
				if cpu != "50000" && !strings.HasPrefix(cpu, "50000 ") {
					t.Errorf("cpu quota after the claim: %s, want 50000 (500m)", cpu)
				}
			}
			// The claim routes are the server's; a claimed member is none.
			rec := httptest.NewRecorder()
			member.Execd().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, execd.ClaimPath, nil))
			if rec.Code != http.StatusNotFound {
				t.Errorf("GET %s through the proxy: %d, want 404", execd.ClaimPath, rec.Code)
			}
			if err := rt.Claim(ctx, member, claim); err == nil {
				t.Error("a second claim succeeded")
			}
			if sb, err := rt.RestoreWarm(ctx, spec); err == nil {
				_ = sb.Close(ctx)
				t.Error("RestoreWarm of a claimed member succeeded")
			}
		})
	}
}

// TestServePools: `hybox serve --kubernetes` refuses a pvc volume whose
// claim is missing and may not be made, and keeps warm pools of Pods:
// a pool made through /v1/pools fills, a create with poolRef gets the
// member's very Pod (re-attached after a server restart) with its env,
// entrypoint and metadata, the pool
// refills with a new Pod, and deleting the sandbox and the pool leaves no
// Pod and no Secret.
func TestServePools(t *testing.T) {
	env := k8stest.Cluster(t)
	image := env.Image(t)
	vaultKey := filepath.Join(t.TempDir(), "vault.key")
	if err := os.WriteFile(vaultKey, []byte(strings.Repeat("5a", 32)), 0o600); err != nil {
		t.Fatal(err)
	}
	do, restart := serveK8s(t, env, fmt.Sprintf("[vault]\nkey_file = %q\n", vaultKey))
	ctx := context.Background()
	pods := env.Client.CoreV1().Pods(k8stest.Namespace)
	secrets := env.Client.CoreV1().Secrets(k8stest.Namespace)
	type pool struct {
		Status struct{ Total, Allocated, Available, Starting int }
	}
	getPool := func() pool {
		t.Helper()
		st, b := do("GET", "/v1/pools/k8s-runc", "")
		if st != http.StatusOK {
			t.Fatalf("get pool: %d %s", st, b)
		}
		var p pool
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	waitIdle := func(n int) pool {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			p := getPool()
			if p.Status.Available == n && p.Status.Starting == 0 {
				return p
			}
			if time.Now().After(deadline) {
				t.Fatalf("the pool never had %d idle members: %+v", n, p.Status)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	idlePods := func() []string {
		t.Helper()
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: k8s.LabelPool + "=" + k8s.PoolIdle})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil {
				names = append(names, p.Name)
			}
		}
		return names
	}

	// What other tests left is theirs: this test's objects are the new ones.
	managed := func() []string {
		t.Helper()
		sel := metav1.ListOptions{LabelSelector: k8s.LabelManagedBy + "=hybox"}
		pl, err := pods.List(ctx, sel)
		if err != nil {
			t.Fatal(err)
		}
		sl, err := secrets.List(ctx, sel)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range pl.Items {
			names = append(names, "Pod "+p.Name)
		}
		for _, s := range sl.Items {
			names = append(names, "Secret "+s.Name)
		}
		return names
	}
	before := managed()
	if len(before) > 0 {
		t.Logf("objects of other tests before this one: %v", before)
	}

	// pvc volumes are the namespace's claims, checked before anything is
	// made: a missing one the create may not make is a 400 with the reason.
	st, b := do("POST", "/v1/sandboxes", fmt.Sprintf(`{"image":{"uri":%q},"extensions":{"hybox.io/runtime":"runc"},
		"volumes":[{"name":"data","mountPath":"/data","pvc":{"claimName":"no-such-claim","createIfNotExists":false}}]}`, image))
	if st != http.StatusBadRequest || !strings.Contains(string(b), "PersistentVolumeClaim no-such-claim does not exist") {
		t.Errorf("a missing claim: %d %s, want 400 saying it does not exist", st, b)
	}

	st, b = do("POST", "/v1/pools", fmt.Sprintf(`{"name":"k8s-runc","template":{"image":{"uri":%q},"runtime":"runc"},
		"capacitySpec":{"bufferMin":1,"bufferMax":1,"poolMin":0,"poolMax":4}}`, image))
	if st != http.StatusCreated {
		t.Fatalf("create pool: %d %s", st, b)
	}
	deleted := false
	t.Cleanup(func() {
		if !deleted {
			do("DELETE", "/v1/pools/k8s-runc", "")
		}
	})
	waitIdle(1)
	members := idlePods()
	if len(members) != 1 {
		t.Fatalf("idle member Pods %v, want one", members)
	}
	memberPod, err := pods.Get(ctx, members[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A restart re-attaches the idle member (RestoreWarm): the same Pod is
	// the pool's again, and no other starts.
	restart()
	if p := waitIdle(1); p.Status.Total != 1 {
		t.Errorf("after a restart: %+v, want the one idle member", p.Status)
	}
	if now := idlePods(); len(now) != 1 || now[0] != memberPod.Name {
		t.Fatalf("idle member Pods after a restart %v, want %s", now, memberPod.Name)
	}

	st, b = do("POST", "/v1/sandboxes", fmt.Sprintf(`{"image":{"uri":%q},"extensions":{"poolRef":"k8s-runc"},
		"entrypoint":["sh","-c","echo up-$GREETING > /tmp/entry; exec sleep infinity"],
		"env":{"GREETING":"hello"},"metadata":{"team":"pools"},"timeout":600}`, image))
	if st != http.StatusAccepted {
		t.Fatalf("create from the pool: %d %s", st, b)
	}
	var sb struct {
		ID       string
		Metadata map[string]string
	}
	if err := json.Unmarshal(b, &sb); err != nil {
		t.Fatal(err)
	}
	if "hybox-"+sb.ID != memberPod.Name {
		t.Fatalf("sandbox %s is not the idle member %s", sb.ID, memberPod.Name)
	}
	if sb.Metadata["team"] != "pools" {
		t.Errorf("metadata %v", sb.Metadata)
	}
	claimed, err := pods.Get(ctx, memberPod.Name, metav1.GetOptions{})
	if err != nil || claimed.UID != memberPod.UID {
		t.Fatalf("the member's Pod after the claim: %v (uid %v, was %s)", err, claimed.UID, memberPod.UID)
	}
	if claimed.Labels[k8s.LabelPool] != k8s.PoolClaimed {
		t.Errorf("claimed Pod labels %v", claimed.Labels)
	}
	runIn := func(id, cmd string) string {
		t.Helper()
		body, _ := json.Marshal(map[string]string{"command": cmd})
		st, b := do("POST", "/v1/sandboxes/"+id+"/proxy/44772/command", string(body))
		if st != http.StatusOK {
			t.Fatalf("command: %d %s", st, b)
		}
		var out strings.Builder
		for _, line := range strings.Split(string(b), "\n") {
			var ev struct{ Type, Text string }
			if json.Unmarshal([]byte(line), &ev) == nil && ev.Type == "stdout" {
				out.WriteString(ev.Text)
			}
		}
		return strings.TrimSpace(out.String())
	}
	run := func(cmd string) string { t.Helper(); return runIn(sb.ID, cmd) }
	if got := run("echo $GREETING"); got != "hello" {
		t.Errorf("env: %q", got)
	}
	deadline := time.Now().Add(30 * time.Second)
	for run("cat /tmp/entry 2>/dev/null") != "up-hello" {
		if time.Now().After(deadline) {
			t.Fatal("the entrypoint did not run with the sandbox's env")
		}
		time.Sleep(100 * time.Millisecond)
	}
	st, b = do("GET", "/v1/sandboxes/"+sb.ID, "")
	if st != http.StatusOK || !strings.Contains(string(b), `"team":"pools"`) {
		t.Errorf("get: %d %s", st, b)
	}

	// Refilled with a new Pod.
	p := waitIdle(1)
	if p.Status.Allocated != 1 {
		t.Errorf("allocated %d, want 1", p.Status.Allocated)
	}
	refill := idlePods()
	if len(refill) != 1 || refill[0] == memberPod.Name {
		t.Fatalf("idle Pods after the refill %v (the claimed one was %s)", refill, memberPod.Name)
	}

	// A policy and a credential vault are bound at claim: the member's
	// very Pod, its agent enforcing them, the trust store with the
	// sandbox's CA written by execd, the vault's API live.
	st, b = do("POST", "/v1/sandboxes", fmt.Sprintf(`{"image":{"uri":%q},"extensions":{"poolRef":"k8s-runc"},
		"entrypoint":["sleep","infinity"],"timeout":600,
		"networkPolicy":{"defaultAction":"deny","egress":[{"action":"allow","target":"api.example.com"}]},"credentialProxy":{"enabled":true}}`, image))
	if st != http.StatusAccepted {
		t.Fatalf("create from the pool with a vault: %d %s", st, b)
	}
	var vsb struct{ ID string }
	if err := json.Unmarshal(b, &vsb); err != nil {
		t.Fatal(err)
	}
	if "hybox-"+vsb.ID != refill[0] {
		t.Fatalf("the sandbox with a vault is %s, not the idle member %s (served cold?)", vsb.ID, refill[0])
	}
	if got := runIn(vsb.ID, "echo $SSL_CERT_FILE $(grep -c 'BEGIN CERTIFICATE' /etc/hybox/ca.crt) $(getent hosts other.example.com >/dev/null && echo resolved || echo denied)"); got != "/etc/ssl/certs/ca-certificates.crt 1 denied" {
		t.Errorf("the claimed sandbox's trust store and resolver: %q", got)
	}
	vaultPath := "/v1/sandboxes/" + vsb.ID + "/proxy/18080/credential-vault"
	if st, b := do("POST", vaultPath, `{"credentials":[{"name":"tok","source":{"type":"inline","value":"secret-tok"}}],"bindings":[{"name":"api","match":{"schemes":["https"],"ports":[443],"hosts":["api.example.com"]},"auth":{"type":"bearer","credential":"tok"}}]}`); st != http.StatusCreated {
		t.Errorf("create the claimed sandbox's vault: %d %s", st, b)
	}
	if st, b := do("DELETE", "/v1/sandboxes/"+vsb.ID, ""); st != http.StatusNoContent {
		t.Fatalf("delete the sandbox with a vault: %d %s", st, b)
	}
	waitIdle(1)

	if st, b := do("DELETE", "/v1/sandboxes/"+sb.ID, ""); st != http.StatusNoContent {
		t.Fatalf("delete sandbox: %d %s", st, b)
	}
	if st, b := do("DELETE", "/v1/pools/k8s-runc", ""); st != http.StatusNoContent {
		t.Fatalf("delete pool: %d %s", st, b)
	}
	deleted = true
	deadline = time.Now().Add(time.Minute)
	for {
		left := slices.DeleteFunc(managed(), func(n string) bool { return slices.Contains(before, n) })
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("left after deleting the sandbox and the pool: %v", left)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := pods.Get(ctx, memberPod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the claimed Pod: %v, want gone", err)
	}
}
