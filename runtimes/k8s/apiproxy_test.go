package k8s_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/runtimes/k8s"
	"github.com/hybox-dev/hybox/runtimes/k8s/k8stest"
	"github.com/hybox-dev/hybox/runtimes/runtimetest"
)

// TestAPIProxy: with Options.Access = api-proxy the backend reaches every
// Pod through the API server's Pod proxy: the conformance suite passes
// that way, and credentials without pods/proxy make a create fail at once
// with a 503 naming the permission, leaving no Pod behind.
func TestAPIProxy(t *testing.T) {
	env := k8stest.Cluster(t)
	execdImage := env.ExecdImage(t)
	image := env.Image(t)
	open := func(t *testing.T, cfg *rest.Config) *k8s.Cluster {
		c, err := k8s.New(context.Background(), k8s.Options{
			Config: cfg, Namespace: k8stest.Namespace, ExecdImage: execdImage,
			ReadyTimeout: 2 * time.Minute, Access: k8s.AccessAPIProxy,
		})
		if err != nil {
			t.Fatal(err)
		}
		if c.Access() != k8s.AccessAPIProxy {
			t.Fatalf("access %q", c.Access())
		}
		return c
	}
	t.Run("Conformance", func(t *testing.T) {
		runtimetest.Run(t, runtimetest.Config{
			Runtime:          open(t, env.Config).Runtime("runc", "runc"),
			Image:            image,
			Entrypoint:       []string{"sleep", "infinity"},
			PauseUnsupported: true,
		})
	})
	t.Run("NoProxyPermission", func(t *testing.T) {
		// A user allowed everything a create needs except pods/proxy.
		ctx := context.Background()
		const user = "hybox-test-no-pods-proxy"
		rbac := env.Client.RbacV1()
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: user},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "secrets"}, Verbs: []string{"*"}}}}
		crole := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"node.k8s.io"}, Resources: []string{"runtimeclasses"}, Verbs: []string{"get", "list"}}}}
		subj := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
		mustMake := func(err error) {
			t.Helper()
			if err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
		}
		_, err := rbac.Roles(k8stest.Namespace).Create(ctx, role, metav1.CreateOptions{})
		mustMake(err)
		_, err = rbac.RoleBindings(k8stest.Namespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user}, Subjects: subj,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user}}, metav1.CreateOptions{})
		mustMake(err)
		_, err = rbac.ClusterRoles().Create(ctx, crole, metav1.CreateOptions{})
		mustMake(err)
		_, err = rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user}, Subjects: subj,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user}}, metav1.CreateOptions{})
		mustMake(err)
		t.Cleanup(func() {
			_ = rbac.RoleBindings(k8stest.Namespace).Delete(ctx, user, metav1.DeleteOptions{})
			_ = rbac.Roles(k8stest.Namespace).Delete(ctx, user, metav1.DeleteOptions{})
			_ = rbac.ClusterRoleBindings().Delete(ctx, user, metav1.DeleteOptions{})
			_ = rbac.ClusterRoles().Delete(ctx, user, metav1.DeleteOptions{})
		})
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
		rt := open(t, cfg).Runtime("runc", "runc")
		spec := runtimes.Spec{ID: "noproxy" + fmt.Sprint(time.Now().UnixNano()%1e6), Image: image, Entrypoint: []string{"sleep", "infinity"}, Dir: t.TempDir()}
		begin := time.Now()
		_, err = rt.Create(ctx, spec)
		took := time.Since(begin)
		if !errors.Is(err, runtimes.ErrUnavailable) || !strings.Contains(fmt.Sprint(err), "pods/proxy") {
			t.Fatalf("create without pods/proxy: %v, want ErrUnavailable naming pods/proxy", err)
		}
		t.Logf("refused after %s: %v", took.Round(time.Millisecond), err)
		deadline := time.Now().Add(time.Minute)
		for {
			_, err := env.Client.CoreV1().Pods(k8stest.Namespace).Get(ctx, "hybox-"+spec.ID, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the refused create left its Pod (err %v)", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
}

// TestServeAPIProxy: `hybox serve` with kubernetes.execd_access =
// "api-proxy" serves commands, a port of the Pod and a terminal over
// WebSocket through the API server, and refuses an egress policy (at
// create and later) with a 400 that says why.
func TestServeAPIProxy(t *testing.T) {
	env := k8stest.Cluster(t)
	image := env.Image(t)
	srv := serveK8sProc(t, env, "", `execd_access = "api-proxy"`)
	entry := `["bash","-c","echo hello-port > /tmp/index.txt; exec python3 -m http.server 8080 -d /tmp"]`
	st, b := srv.do("POST", "/v1/sandboxes", fmt.Sprintf(`{"image":{"uri":%q},"entrypoint":%s,"extensions":{"hybox.io/runtime":"runc"},"timeout":600}`, image, entry))
	if st != http.StatusAccepted {
		t.Fatalf("create: %d %s", st, b)
	}
	var sb struct{ ID string }
	if err := json.Unmarshal(b, &sb); err != nil {
		t.Fatal(err)
	}
	defer srv.do("DELETE", "/v1/sandboxes/"+sb.ID, "")
	if !strings.Contains(srv.log.String(), "access=api-proxy") {
		t.Fatalf("the server does not say it reaches Pods through the API server:\n%s", srv.log.String())
	}
	execd := "/v1/sandboxes/" + sb.ID + "/proxy/44772"
	if st, b := srv.do("POST", execd+"/command", `{"command":"echo via-the-api-server"}`); st != http.StatusOK || !bytes.Contains(b, []byte("via-the-api-server")) {
		t.Fatalf("command: %d %s", st, b)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		st, b := srv.do("GET", "/v1/sandboxes/"+sb.ID+"/proxy/8080/index.txt", "")
		if st == http.StatusOK && strings.TrimSpace(string(b)) == "hello-port" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("port 8080 through the API server: %d %s", st, b)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// A terminal: the WebSocket upgrade crosses the API server too.
	st, b = srv.do("POST", execd+"/pty", `{}`)
	var sess struct {
		SessionID string `json:"session_id"`
	}
	if st != http.StatusOK || json.Unmarshal(b, &sess) != nil {
		t.Fatalf("POST /pty: %d %s", st, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u := strings.Replace(srv.base, "http://", "ws://", 1) + execd + "/pty/" + sess.SessionID + "/ws"
	c, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"OPEN-SANDBOX-API-KEY": {srv.key}}})
	if err != nil {
		t.Fatalf("the terminal's WebSocket: %v", err)
	}
	defer c.CloseNow()
	if err := c.Write(ctx, websocket.MessageBinary, append([]byte{0}, "echo pty-$((6*7))\n"...)); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for !strings.Contains(out.String(), "pty-42") {
		typ, msg, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("terminal: %v (output so far %q)", err, out.String())
		}
		if typ == websocket.MessageBinary && len(msg) > 0 && (msg[0] == 1 || msg[0] == 3) {
			out.Write(msg[1:])
		}
	}

	// No egress agent can be reached this way: policies are refused.
	if st, b := srv.do("PUT", "/v1/sandboxes/"+sb.ID+"/proxy/18080/policy", `{"defaultAction":"deny","egress":[]}`); st != http.StatusBadRequest || !bytes.Contains(b, []byte("api-proxy")) {
		t.Errorf("a policy on a sandbox reached through the API server: %d %s, want 400 naming api-proxy", st, b)
	}
	st, b = srv.do("POST", "/v1/sandboxes", fmt.Sprintf(`{"image":{"uri":%q},"entrypoint":["sleep","infinity"],"networkPolicy":{"defaultAction":"deny","egress":[]}}`, image))
	if st != http.StatusBadRequest || !bytes.Contains(b, []byte("api-proxy")) {
		t.Errorf("a create with a policy: %d %s, want 400 naming api-proxy", st, b)
	}
}

// BenchmarkAccessCommand: one runc Pod sandbox per access mode, then a
// command (`echo hi`) to its result, each iteration one command: what the
// API server's Pod proxy adds to every request. Reports p50 and p99.
//
//	go test -trimpath ./runtimes/k8s -run '^$' -bench AccessCommand -benchtime 200x
func BenchmarkAccessCommand(b *testing.B) {
	env := k8stest.Cluster(b)
	execdImage := env.ExecdImage(b)
	image := env.Image(b)
	for _, access := range []string{k8s.AccessPodIP, k8s.AccessAPIProxy} {
		b.Run(access, func(b *testing.B) {
			c, err := k8s.New(context.Background(), k8s.Options{Config: env.Config, Namespace: k8stest.Namespace,
				ExecdImage: execdImage, ReadyTimeout: 2 * time.Minute, Access: access})
			if err != nil {
				b.Fatal(err)
			}
			rt := c.Runtime("runc", "runc")
			ctx := context.Background()
			spec := runtimes.Spec{ID: "bench-" + suffix(), Image: image, Entrypoint: []string{"sleep", "infinity"}}
			sb, err := rt.Create(ctx, spec)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				_ = sb.Close(ctx)
				_ = rt.Destroy(ctx, spec)
			})
			var took []time.Duration
			for b.Loop() {
				begin := time.Now()
				code, out := execdCommand(sb, "echo hi")
				took = append(took, time.Since(begin))
				if code != 200 || !strings.Contains(out, "hi") {
					b.Fatalf("command: %d %s", code, out)
				}
			}
			b.ReportMetric(pct(took, 50), "command-p50-ms")
			b.ReportMetric(pct(took, 99), "command-p99-ms")
		})
	}
}
