package ocitest

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/runtimes/oci"
)

// GVisorBuild is gVisor as the tests use it.
type GVisorBuild struct {
	// Dir holds runsc and containerd-shim-runsc-v1 ("" = no build).
	Dir string
	// Platform is the platform runsc runs on here (systrap or ptrace).
	Platform string
	// Err says why there is no usable gVisor.
	Err error
}

// Runsc is the runsc binary of the build ("" when there is none).
func (g GVisorBuild) Runsc() string {
	if g.Dir == "" {
		return ""
	}
	return filepath.Join(g.Dir, "runsc")
}

var (
	gvisorOnce sync.Once
	gvisorRes  GVisorBuild
)

// GVisor builds gVisor's runsc and shim with
// scripts/containers/build-gvisor.sh (cached under [CacheDir]/gvisor by
// version: a cold build takes about two minutes, a cached one a moment),
// probes its platform with [oci.ProbeRunscPlatform] and writes
// [RunscConfig], once per process. A failure is logged, not fatal: runsc is
// then missing from [Runtimes], and the tests that need it fail.
func GVisor(t testing.TB) GVisorBuild {
	t.Helper()
	gvisorOnce.Do(func() {
		begin := time.Now()
		out, err := script(t, 15*time.Minute, "build-gvisor.sh", filepath.Join(CacheDir, "gvisor"))
		if err != nil {
			gvisorRes.Err = fmt.Errorf("build gVisor: %v\n%s", err, out)
			return
		}
		lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
		dir := string(lines[len(lines)-1])
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		platform, err := oci.ProbeRunscPlatform(ctx, filepath.Join(dir, "runsc"), ExecdBinary(t), t.TempDir(), oci.RunscPlatforms)
		if err != nil {
			gvisorRes.Err = err
			return
		}
		cfg := oci.RunscConfig{Binary: filepath.Join(dir, "runsc"), Platform: platform}
		if err := cfg.WriteFile(RunscConfig()); err != nil {
			gvisorRes.Err = err
			return
		}
		gvisorRes = GVisorBuild{Dir: dir, Platform: platform}
		t.Logf("gVisor from %s on platform %s (%v)", dir, platform, time.Since(begin).Round(time.Millisecond))
	})
	if gvisorRes.Err != nil {
		t.Logf("no gVisor: %v", gvisorRes.Err)
	}
	return gvisorRes
}
