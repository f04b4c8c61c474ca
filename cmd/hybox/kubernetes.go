package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/runtimes/k8s"
	"github.com/hybox-dev/hybox/server"
)

// kubernetesConfig is [kubernetes]: container sandboxes as Pods of a
// cluster (runtimes/k8s) instead of containers of a local containerd.
type kubernetesConfig struct {
	// Enabled selects the Kubernetes backend for container sandboxes
	// (--kubernetes); the local containerd backend is then not started.
	Enabled bool `toml:"enabled"`
	// Kubeconfig reaches the API server; "" = the in-cluster config (the
	// Pod's ServiceAccount).
	Kubeconfig string `toml:"kubeconfig"`
	// Namespace holds the sandboxes' Pods and Secrets.
	Namespace string `toml:"namespace"`
	// ExecdImage is the image holding the static hybox-execd at
	// /hybox-execd, present on every node (imagePullPolicy Never).
	ExecdImage string `toml:"execd_image"`
	// Runtimes maps the names of extensions["hybox.io/runtime"] to the
	// cluster's RuntimeClasses (default runc → runc, runsc → gvisor).
	Runtimes map[string]string `toml:"runtimes"`
	// DefaultMemory is the memory limit of a sandbox that asks for none.
	DefaultMemory string `toml:"default_memory"`
	// UnenforcedEgress accepts sandboxes although this backend does not
	// yet enforce egress policies inside Pods. Set it only where Pods have
	// no route off the cluster that matters.
	UnenforcedEgress bool `toml:"unenforced_egress"`
}

// kubernetesTimeout bounds every call to the API server.
const kubernetesTimeout = 15 * time.Second

// kubernetesRuntimes connects to the cluster of cfg.Kubernetes and returns
// one runtime per configured RuntimeClass, in name order.
//
// # Errors
// When the kubeconfig cannot be read or options are invalid. An API server
// that does not answer is not an error: the runtimes answer 503 until it
// does.
func kubernetesRuntimes(ctx context.Context, cfg *config, log *slog.Logger) ([]runtimes.Runtime, error) {
	kc := cfg.Kubernetes
	var rc *rest.Config
	var err error
	if kc.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", kc.Kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	mem, err := server.ParseQuantityBytes(kc.DefaultMemory)
	if err != nil {
		return nil, fmt.Errorf("kubernetes.default_memory: %w", err)
	}
	// No call hangs on an API server that does not answer.
	rc.Timeout = kubernetesTimeout
	c, err := k8s.Open(k8s.Options{Config: rc, Namespace: kc.Namespace, ExecdImage: kc.ExecdImage,
		DefaultMemoryBytes: mem, UnenforcedEgress: kc.UnenforcedEgress, AllowedHostPaths: cfg.AllowedHostPaths, Logger: log})
	if err != nil {
		return nil, err
	}
	classes := kc.Runtimes
	if len(classes) == 0 {
		classes = map[string]string{"runc": "runc", "runsc": "gvisor"}
	}
	var out []runtimes.Runtime
	for _, name := range slices.Sorted(maps.Keys(classes)) {
		out = append(out, c.Runtime(name, classes[name]))
	}
	if have, err := c.RuntimeClasses(ctx); err != nil {
		// Served anyway: its creates answer 503 with the reason until the
		// API server answers, and the wasm tier is unaffected.
		log.Warn("the Kubernetes API server does not answer; Pod sandboxes are unavailable until it does", "err", err)
	} else {
		log.Info("container sandboxes run as Pods", "namespace", kc.Namespace, "runtimes", classes, "clusterRuntimeClasses", have,
			"egressEnforced", false)
	}
	if kc.UnenforcedEgress {
		log.Warn("kubernetes.unenforced_egress is set: sandboxes' network policies are NOT enforced inside Pods")
	}
	return out, nil
}
