package k8s_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/runtimes/k8s/k8stest"
	"github.com/hybox-dev/hybox/runtimes/oci/ocitest"
)

// TestOfficialSDKs runs the official OpenSandbox SDK suites (e2e/: the
// JavaScript SDK from npm and the Python SDKs from PyPI, unchanged) through
// scripts/e2e.sh against `bin/hybox serve --kubernetes` on the test
// cluster: their container passes with sandboxes as runc Pods and as gVisor
// Pods (egress policies and the credential vault enforced in both), every response
// checked against the protocol document, nothing left behind. It needs
// `make build` (bin/hybox, bin/hybox-execd); make test-k8s runs it.
func TestOfficialSDKs(t *testing.T) {
	env := k8stest.Cluster(t)
	execdImage := env.ExecdImage(t)
	env.Image(t)
	repo := ocitest.RepoRoot()
	for _, b := range []string{"bin/hybox", "bin/hybox-execd"} {
		if _, err := os.Stat(filepath.Join(repo, b)); err != nil {
			t.Fatalf("%s: %v (make build makes it; make test-k8s builds first)", b, err)
		}
	}
	conf := filepath.Join(t.TempDir(), "hybox.toml")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`[kubernetes]
enabled = true
kubeconfig = %q
namespace = %q
execd_image = %q
`, env.Kubeconfig, k8stest.Namespace, execdImage)), 0o600); err != nil {
		t.Fatal(err)
	}
	// runc Pods, and gVisor Pods where the cluster has the class.
	passes := "runc"
	if slices.Contains(env.Classes, "gvisor") {
		passes += " runsc"
	}
	begin := time.Now()
	cmd := exec.Command(filepath.Join(repo, "scripts", "e2e.sh"))
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "HYBOX_E2E_KUBERNETES_CONFIG="+conf, "HYBOX_E2E_PASSES="+passes,
		"HYBOX_REQUIRE_CONTAINERS=1", "HYBOX_E2E_LOG_DIR="+filepath.Join(repo, "build", "e2e-logs-k8s"),
		// The test cluster has no storage provisioner, so a claim the
		// suites ask to be made would stay Pending (TestVolumes binds
		// claims to PersistentVolumes it makes itself).
		"HYBOX_E2E_NO_PVC=the test cluster has no storage provisioner")
	out, err := cmd.CombinedOutput()
	t.Logf("scripts/e2e.sh on the cluster (%v):\n%s", time.Since(begin).Round(time.Second), tail(out, 60))
	if err != nil {
		t.Fatalf("the official SDK suites against Pod sandboxes: %v", err)
	}
}

// tail returns the last n lines of b.
func tail(b []byte, n int) []byte {
	lines := 0
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			if lines++; lines > n {
				return b[i+1:]
			}
		}
	}
	return b
}
