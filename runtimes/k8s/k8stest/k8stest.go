// Package k8stest gives tests of the Kubernetes backend a real cluster: the
// single-node cluster of scripts/k8s/cluster.sh (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and kubelet built from source, a
// private containerd with RuntimeClasses runc and gvisor). [Cluster] uses
// the cluster that is up, or brings one up when allowed ([UpEnv]; a cold
// build takes 8-25 minutes); [Main] brings down a cluster that this test
// binary brought up.
// It also builds and imports the images Pods need (imagePullPolicy Never:
// there is no registry): the hybox-execd image and the test image.
//
// Tests skip, with the reason, when not run as root, when no cluster is up
// and none may be brought up, or when the cluster cannot be built or
// started; with HYBOX_REQUIRE_K8S set they fail instead.
package k8stest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hybox-dev/hybox/runtimes/k8s"
	"github.com/hybox-dev/hybox/runtimes/oci/ocitest"
)

const (
	// RequireEnv, when set to anything, turns every skip of this package
	// into a failure (make test-k8s sets it).
	RequireEnv = "HYBOX_REQUIRE_K8S"
	// UpEnv, when set to anything, lets [Cluster] bring a cluster up when
	// none answers (make test-k8s sets it). Without it the tests skip, so
	// that `go test ./...` never starts a cluster build of its own.
	UpEnv = "HYBOX_K8S_UP"
	// KeepEnv, when set to anything, leaves a cluster that a test binary
	// brought up running after it ends (for a series of runs).
	KeepEnv = "HYBOX_K8S_KEEP"
	// Namespace holds the test sandboxes' Pods.
	Namespace = "hybox-test"
	// TestImage is the image of the test sandboxes (ocitest's).
	TestImage = ocitest.ImageName
)

// Env is a running cluster.
type Env struct {
	// Kubeconfig is the admin kubeconfig's path.
	Kubeconfig string
	// Config reaches the API server as admin.
	Config *rest.Config
	// Client is a clientset on Config.
	Client kubernetes.Interface
	// Classes are the cluster's RuntimeClasses.
	Classes []string
}

var (
	mu        sync.Mutex
	env       *Env
	envErr    string // why there is no cluster (a skip message)
	broughtUp bool
	imported  = map[string]bool{}
	// release ends this binary's use of the cluster (the session lock).
	release func()
)

// sessionLock is held from a test binary's first [Cluster] until its
// [Main] ends, so that test binaries run one after another on the one
// cluster of the machine: none uses a cluster that another is about to
// bring down, and none brings down a cluster another is using.
const sessionLock = "/var/lib/hybox-k8s.session.lock"

// script runs scripts/k8s/cluster.sh with args.
func script(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(ocitest.RepoRoot(), "scripts", "k8s", "cluster.sh"), args...)
	cmd.Dir = ocitest.RepoRoot()
	cmd.WaitDelay = 10 * time.Second
	return cmd.CombinedOutput()
}

// unavailable skips t, or fails it when [RequireEnv] is set.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv(RequireEnv) != "" {
		t.Fatalf("%s (%s is set, so this is a failure)", msg, RequireEnv)
	}
	t.Skip(msg)
}

// Cluster returns the running test cluster. When none answers and
// [UpEnv] is set, it brings one up with scripts/k8s/cluster.sh up (once per
// test binary; the first cold build takes 8-25 minutes). It skips t when
// not root, when no cluster is up and [UpEnv] is not set, and when the
// cluster cannot be built or started (the script's output is in the
// message).
func Cluster(t testing.TB) *Env {
	t.Helper()
	if os.Geteuid() != 0 {
		unavailable(t, "the Kubernetes test cluster needs root (containerd, kubelet, bridge, cgroups)")
	}
	mu.Lock()
	defer mu.Unlock()
	if env != nil {
		return env
	}
	if envErr != "" {
		unavailable(t, "%s", envErr)
	}
	if release == nil {
		begin := time.Now()
		unlock, err := lock(sessionLock)
		if err != nil {
			t.Fatal(err)
		}
		release = unlock
		if d := time.Since(begin); d > time.Second {
			t.Logf("waited %v for another test binary to finish with the cluster (%s)", d.Round(time.Second), sessionLock)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	unlock, err := lock("/var/lib/hybox-k8s.lock")
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	out, err := script(ctx, "status")
	if err != nil && os.Getenv(UpEnv) == "" {
		envErr = fmt.Sprintf("no Kubernetes test cluster is up (make k8s-up starts one; make test-k8s, or %s=1, lets the tests bring one up)", UpEnv)
		unavailable(t, "%s", envErr)
	}
	if err != nil {
		begin := time.Now()
		t.Logf("no test cluster answers; bringing one up with scripts/k8s/cluster.sh up (a cold build takes about ten minutes)")
		out, err = script(ctx, "up")
		if err != nil {
			down, _ := script(context.Background(), "down")
			envErr = fmt.Sprintf("the Kubernetes test cluster could not be brought up: %v\n%s\n(down: %s)", err, out, down)
			unavailable(t, "%s", envErr)
		}
		broughtUp = true
		t.Logf("test cluster up in %v", time.Since(begin).Round(100*time.Millisecond))
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	kubeconfig := lines[len(lines)-1]
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("kubeconfig %s: %v", kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("namespace %s: %v", Namespace, err)
	}
	// The namespace's default ServiceAccount comes from the controller
	// manager; Pods are refused until it exists.
	for {
		if _, err := client.CoreV1().ServiceAccounts(Namespace).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no default ServiceAccount in %s", Namespace)
		case <-time.After(100 * time.Millisecond):
		}
	}
	list, err := client.NodeV1().RuntimeClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e := &Env{Kubeconfig: kubeconfig, Config: cfg, Client: client}
	for _, rc := range list.Items {
		e.Classes = append(e.Classes, rc.Name)
	}
	env = e
	return env
}

// Main runs the package's tests and brings down a cluster that [Cluster]
// brought up (unless [KeepEnv] is set). Use it as TestMain:
//
//	func TestMain(m *testing.M) { k8stest.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	mu.Lock()
	up, unlock := broughtUp, release
	mu.Unlock()
	if up && os.Getenv(KeepEnv) == "" {
		if out, err := script(context.Background(), "down"); err != nil {
			fmt.Fprintf(os.Stderr, "k8stest: cluster.sh down: %v\n%s", err, out)
			if code == 0 {
				code = 1
			}
		}
	}
	if unlock != nil {
		unlock()
	}
	os.Exit(code)
}

// Import imports the OCI image archive at path into the node's containerd
// (once per path and test binary).
func (e *Env) Import(t testing.TB, path string) {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if imported[path] {
		return
	}
	begin := time.Now()
	if out, err := script(context.Background(), "import", path); err != nil {
		t.Fatalf("import %s: %v\n%s", path, err, out)
	}
	t.Logf("imported %s into the node in %v", filepath.Base(path), time.Since(begin).Round(time.Millisecond))
	imported[path] = true
}

// ExecdImage builds the static hybox-execd, packs it as the hybox-execd
// image (k8s.ExecdImageArchive), imports it and returns its name.
func (e *Env) ExecdImage(t testing.TB) string {
	t.Helper()
	bin := ocitest.ExecdBinary(t)
	var buf bytes.Buffer
	name, err := k8s.ExecdImageArchive(context.Background(), &buf, bin)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(filepath.Dir(bin), "hybox-execd.oci.tar")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	e.Import(t, path)
	return name
}

// Image builds the test image archive when missing or stale
// (scripts/containers/build-image.sh, cached as ocitest's) and imports it;
// it returns [TestImage].
func (e *Env) Image(t testing.TB) string {
	t.Helper()
	archive := ocitest.ImageArchive()
	cmd := exec.Command(filepath.Join(ocitest.RepoRoot(), "scripts", "containers", "build-image.sh"), archive)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", archive, err, out)
	}
	e.Import(t, archive)
	return TestImage
}

// lock takes an exclusive lock on path (between test binaries).
func lock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
