package k8s_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/runtimes/k8s"
	"github.com/hybox-dev/hybox/runtimes/k8s/k8stest"
	"github.com/hybox-dev/hybox/runtimes/runtimetest"
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
	t.Run("Volumes", func(t *testing.T) {
		spec := runtimes.Spec{ID: "volumes-" + suffix(), Image: image,
			Volumes: []runtimes.Volume{{Name: "v", HostPath: "/tmp", MountPath: "/data"}}}
		if err := c.Runtime("runc", "runc").Validate(spec); !errors.Is(err, runtimes.ErrNotSupported) {
			t.Fatalf("validate: %v, want ErrNotSupported", err)
		}
	})
}

func suffix() string { return strconv.FormatInt(time.Now().UnixNano(), 36) }

// assertGone checks that no Pod or Secret of sandbox id is left.
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
