package oci_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/runtimes/oci"
	"github.com/hybox-dev/hybox/runtimes/oci/ocitest"
	"github.com/hybox-dev/hybox/runtimes/runtimetest"
)

var (
	execdOnce sync.Once
	execdBin  string
	execdErr  error
)

// buildExecd builds the static hybox-execd once per test binary.
func buildExecd(t testing.TB) string {
	t.Helper()
	execdOnce.Do(func() {
		dir, err := os.MkdirTemp("", "hybox-execd-")
		if err != nil {
			execdErr = err
			return
		}
		execdBin = filepath.Join(dir, "hybox-execd")
		cmd := exec.Command("go", "build", "-trimpath", "-o", execdBin, "github.com/hybox-dev/hybox/cmd/hybox-execd")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			execdErr = err
			execdBin = string(out)
		}
	})
	if execdErr != nil {
		t.Fatalf("build hybox-execd: %v\n%s", execdErr, execdBin)
	}
	return execdBin
}

// newBackend connects to the test containerd (skipping, with the reason,
// where there is none and HYBOX_REQUIRE_CONTAINERS is unset).
func newBackend(t testing.TB, edit ...func(*oci.Options)) *oci.Containerd {
	t.Helper()
	sock := ocitest.Containerd(t)
	ocitest.Image(t, sock)
	opts := oci.Options{
		Address:     sock,
		Namespace:   ocitest.Namespace,
		ExecdBinary: buildExecd(t),
		RunscBinary: ocitest.Runsc().Binary, RunscPlatform: ocitest.GVisor(t).Platform,
		CNIPluginDir: "/usr/lib/cni",
		StateDir:     t.TempDir(),
	}
	for _, e := range edit {
		e(&opts)
	}
	b, err := oci.New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func runtimeNamed(t testing.TB, b *oci.Containerd, name string) runtimes.Runtime {
	for _, rt := range b.Runtimes() {
		if rt.Name() == name {
			return rt
		}
	}
	t.Fatalf("runtime %s not offered", name)
	return nil
}

func TestConformanceRunc(t *testing.T) {
	b := newBackend(t)
	runtimetest.Run(t, runtimetest.Config{Runtime: runtimeNamed(t, b, "runc"), Image: ocitest.ImageName,
		Entrypoint: []string{"sleep", "infinity"}})
}

func TestConformanceRunsc(t *testing.T) {
	b := newBackend(t)
	runtimetest.Run(t, runtimetest.Config{Runtime: runtimeNamed(t, b, "runsc"), Image: ocitest.ImageName,
		Entrypoint: []string{"sleep", "infinity"}})
}

// Without a working gVisor the backend still serves runc, and says why it
// has no runsc.
func TestRunscUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*oci.Options)
		want string
	}{
		{"binary missing, platform probed", func(o *oci.Options) { o.RunscBinary = "/nonexistent/runsc"; o.RunscPlatform = "" }, "no such file"},
		{"binary missing, platform given", func(o *oci.Options) { o.RunscBinary = "/nonexistent/runsc"; o.RunscPlatform = "systrap" }, "no such file"},
		{"unknown platform", func(o *oci.Options) { o.RunscPlatform = "kvm" }, `platform "kvm"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackend(t, tc.edit)
			var names []string
			for _, rt := range b.Runtimes() {
				names = append(names, rt.Name())
			}
			if len(names) != 1 || names[0] != "runc" {
				t.Fatalf("runtimes %v, want [runc]", names)
			}
			cfg, err := b.Runsc()
			if cfg != nil || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Runsc() = %v, %v; want an error containing %q", cfg, err, tc.want)
			}
		})
	}
}
