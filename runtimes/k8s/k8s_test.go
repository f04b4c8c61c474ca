package k8s_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/runtimes/k8s"
	"github.com/hybox-dev/hybox/runtimes/k8s/k8stest"
	"github.com/hybox-dev/hybox/runtimes/runtimetest"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

func TestMain(m *testing.M) { k8stest.Main(m) }

// cluster connects the backend to the test cluster, with the execd image
// and the test image imported into its node.
func cluster(t *testing.T) (*k8s.Cluster, *k8stest.Env, string) { return clusterB(t) }

func clusterB(t testing.TB) (*k8s.Cluster, *k8stest.Env, string) {
	t.Helper()
	env := k8stest.Cluster(t)
	execdImage := env.ExecdImage(t)
	image := env.Image(t)
	c, err := k8s.New(context.Background(), k8s.Options{
		Config: env.Config, Namespace: k8stest.Namespace, ExecdImage: execdImage,
		ReadyTimeout: 2 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c, env, image
}

// TestConformance runs the shared suite on Pods of RuntimeClass runc and,
// when the cluster has it, gvisor.
func TestConformance(t *testing.T) {
	c, env, image := cluster(t)
	for _, rc := range []struct{ name, class string }{{"runc", "runc"}, {"runsc", "gvisor"}} {
		t.Run(rc.class, func(t *testing.T) {
			if !slices.Contains(env.Classes, rc.class) {
				t.Skipf("the test cluster has no RuntimeClass %s (it has %v); gVisor was not built", rc.class, env.Classes)
			}
			runtimetest.Run(t, runtimetest.Config{
				Runtime:          c.Runtime(rc.name, rc.class),
				Image:            image,
				Entrypoint:       []string{"sleep", "infinity"},
				PauseUnsupported: true,
			})
		})
	}
}

// TestBadInput: what the user got wrong is a 400 that says what the
// cluster has, and leaves nothing behind.
func TestBadInput(t *testing.T) {
	c, env, image := cluster(t)
	ctx := context.Background()
	t.Run("UnknownRuntimeClass", func(t *testing.T) {
		spec := runtimes.Spec{ID: "badclass-" + suffix(), Image: image}
		err := c.Runtime("kata", "kata").Validate(spec)
		if !errors.Is(err, runtimes.ErrInvalid) {
			t.Fatalf("validate: %v, want ErrInvalid", err)
		}
		for _, class := range env.Classes {
			if !strings.Contains(err.Error(), class) {
				t.Errorf("the error does not name the cluster's RuntimeClass %s: %v", class, err)
			}
		}
		if _, err := c.Runtime("kata", "kata").Create(ctx, spec); !errors.Is(err, runtimes.ErrInvalid) {
			t.Fatalf("create: %v, want ErrInvalid", err)
		}
		assertGone(t, env, spec.ID)
	})
	t.Run("ImageNotOnNode", func(t *testing.T) {
		spec := runtimes.Spec{ID: "noimage-" + suffix(), Image: "localhost/hybox/not-imported:1"}
		_, err := c.Runtime("runc", "runc").Create(ctx, spec)
		if !errors.Is(err, runtimes.ErrInvalid) || !strings.Contains(err.Error(), "ErrImageNeverPull") ||
			!strings.Contains(err.Error(), spec.Image) {
			t.Fatalf("create: %v, want ErrInvalid naming the image and ErrImageNeverPull", err)
		}
		assertGone(t, env, spec.ID)
	})
	t.Run("HostVolumeNotAllowed", func(t *testing.T) {
		// This cluster's backend has no allowed host paths.
		spec := runtimes.Spec{ID: "volumes-" + suffix(), Image: image,
			Volumes: []runtimes.Volume{{Name: "v", HostPath: "/tmp", MountPath: "/data"}}}
		err := c.Runtime("runc", "runc").Validate(spec)
		if !errors.Is(err, runtimes.ErrInvalid) || !strings.Contains(err.Error(), "not allowed") {
			t.Fatalf("validate: %v, want ErrInvalid saying host volumes are not allowed", err)
		}
	})
}

// command runs cmd in sb through its execd API and returns its stdout.
func command(t *testing.T, sb runtimes.Sandbox, cmd string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"command": cmd})
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/command", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	sb.Execd().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("command %q: %d %s", cmd, rec.Code, rec.Body)
	}
	var out strings.Builder
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		var ev struct{ Type, Text string }
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Type == "stdout" {
			out.WriteString(ev.Text)
		}
	}
	return strings.TrimSpace(out.String())
}

func suffix() string { return strconv.FormatInt(time.Now().UnixNano(), 36) }

// assertGone checks that no Pod or Secret of sandbox id is left.
// destroyAtCleanup closes sb and destroys its sandbox when t ends; a
// failed Destroy fails t.
func destroyAtCleanup(t *testing.T, rt *k8s.Runtime, sb runtimes.Sandbox, spec runtimes.Spec) {
	t.Cleanup(func() {
		_ = sb.Close(context.Background())
		if err := rt.Destroy(context.Background(), spec); err != nil {
			t.Error(err)
		}
	})
}

func assertGone(t *testing.T, env *k8stest.Env, id string) {
	t.Helper()
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: k8s.LabelSandbox + "=" + id}
	pods, err := env.Client.CoreV1().Pods(k8stest.Namespace).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := env.Client.CoreV1().Secrets(k8stest.Namespace).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items)+len(secrets.Items) > 0 {
		t.Fatalf("sandbox %s left %d Pods and %d Secrets", id, len(pods.Items), len(secrets.Items))
	}
}

// TestSandbox: what the backend offers beyond the suite: the one-shot code
// path, the end of a sandbox on its own, and the sweep of unrecorded Pods.
func TestSandbox(t *testing.T) {
	c, env, image := cluster(t)
	rt := c.Runtime("runc", "runc")
	ctx := context.Background()
	newSpec := func(name string) runtimes.Spec {
		return runtimes.Spec{ID: name + "-" + suffix(), Image: image, Entrypoint: []string{"sleep", "infinity"}}
	}
	create := func(t *testing.T, spec runtimes.Spec) runtimes.Sandbox {
		sb, err := rt.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		destroyAtCleanup(t, rt, sb, spec)
		return sb
	}
	t.Run("RunCode", func(t *testing.T) {
		sb := create(t, newSpec("runcode"))
		var got []string
		code := "print(6*7)"
		err := sb.(runtimes.CodeRunner).RunCode(ctx, api.CodeRunRequest{Code: &code,
			Context: api.CodeRunContext{Language: "python"}}, sinkFunc(func(ev execd.Event) bool {
			got = append(got, ev.Text)
			return true
		}))
		if err != nil || !strings.Contains(strings.Join(got, ""), "42") {
			t.Fatalf("RunCode: %v, output %q", err, got)
		}
	})
	t.Run("Exited", func(t *testing.T) {
		sb := create(t, newSpec("exited"))
		// hybox-execd is PID 1: SIGTERM makes it stop and exit 0.
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/command", strings.NewReader(`{"command":"kill -TERM 1"}`))
		req.Header.Set("Content-Type", "application/json")
		sb.Execd().ServeHTTP(rec, req)
		select {
		case st, ok := <-sb.(runtimes.Exiter).Exited():
			if !ok || st.Reason != "Exited" || st.Code != 0 {
				t.Fatalf("exit status %+v (ok %v), want {0 Exited}", st, ok)
			}
		case <-time.After(2 * time.Minute):
			t.Fatal("no exit reported")
		}
	})
	t.Run("Sweep", func(t *testing.T) {
		kept, swept := newSpec("kept"), newSpec("swept")
		create(t, kept)
		sb, err := rt.Create(ctx, swept)
		if err != nil {
			t.Fatal(err)
		}
		_ = sb.Close(ctx)
		// A Secret whose Pod was never made (its create's request was
		// cancelled after the API server took it), as the backend labels it.
		lone := newSpec("lone")
		if _, err := env.Client.CoreV1().Secrets(k8stest.Namespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
			Name:        "hybox-" + lone.ID,
			Labels:      map[string]string{k8s.LabelManagedBy: "hybox", k8s.LabelSandbox: lone.ID},
			Annotations: map[string]string{k8s.AnnotationRuntime: "runc"},
		}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := rt.Sweep(ctx, func(id string) bool { return id != swept.ID && id != lone.ID }); err != nil {
			t.Fatal(err)
		}
		assertGone(t, env, swept.ID)
		assertGone(t, env, lone.ID)
		if _, err := rt.Restore(ctx, kept); err != nil {
			t.Fatalf("the kept sandbox: %v", err)
		}
	})
}

type sinkFunc func(execd.Event) bool

func (f sinkFunc) Send(ev execd.Event) bool { return f(ev) }
