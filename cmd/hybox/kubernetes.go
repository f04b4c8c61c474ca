package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
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
	// DNSUpstreams are the resolvers ("ip:port") the Pods' egress agents
	// forward allowed names to; empty: egress.dns_upstreams.
	DNSUpstreams []string `toml:"dns_upstreams"`
	// IngressFrom are the hybox servers' addresses (CIDRs): when set, a
	// NetworkPolicy lets the sandboxes' Pods take connections only from
	// them, where the cluster's CNI enforces NetworkPolicy.
	IngressFrom []string `toml:"ingress_from"`
	// SharedState keeps the records of Pod sandboxes in the cluster (the
	// custom resource sandboxes.hybox.dev), so that several servers on
	// one cluster serve every one of them (--shared-state).
	SharedState bool `toml:"shared_state"`
	// Replica names this server in the leader election (env
	// HYBOX_REPLICA); "" = the host name and the process id.
	Replica string `toml:"replica"`
	// ReplicaAddress is the base URL (http://host:port) where the other
	// replicas reach this one, to forward requests for the wasm sandboxes
	// it holds (env HYBOX_REPLICA_ADDRESS); "" = http://<addr>, or
	// http://$POD_IP:<port> when addr listens on every address.
	ReplicaAddress string `toml:"replica_address"`
	// SharedDir is a directory every replica mounts (a ReadWriteMany
	// volume) holding the directories of the wasm sandboxes that live in
	// each replica's process, so that another replica takes such a
	// sandbox over when its replica is gone (--shared-dir, env
	// HYBOX_SHARED_DIR); "" = they stay in the data directory and are
	// reported lost with their replica. Needs shared_state.
	SharedDir string `toml:"shared_dir"`
	// ExecdAccess is how the server reaches the Pods' execd and ports:
	// "pod-ip" (default: the server is on the Pod network) or "api-proxy"
	// (through the API server's Pod proxy, for a server outside it; no
	// egress policies then).
	ExecdAccess string `toml:"execd_access"`
	// LeaseDuration is how long a replica that stopped renewing keeps the
	// lead (default 15s).
	LeaseDuration duration `toml:"lease_duration"`
}

// replicaName is this server's name among the replicas: kubernetes.replica,
// else the host name and the process id.
func replicaName(kc kubernetesConfig) string {
	if kc.Replica != "" {
		return kc.Replica
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// replicaAddress is the base URL the other replicas reach this one at.
//
// # Errors
// When addr listens on every address and neither replica_address nor
// POD_IP says which one the others can use.
func replicaAddress(cfg *config) (string, error) {
	if a := cfg.Kubernetes.ReplicaAddress; a != "" {
		return strings.TrimRight(a, "/"), nil
	}
	host, port, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return "", fmt.Errorf("addr %q: %w", cfg.Addr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = os.Getenv("POD_IP")
		if host == "" {
			return "", fmt.Errorf("kubernetes.replica_address is required: addr %q listens on every address and POD_IP is not set", cfg.Addr)
		}
	}
	return "http://" + net.JoinHostPort(host, port), nil
}

// kubernetesTimeout bounds every call to the API server.
const kubernetesTimeout = 15 * time.Second

// The server's client-side rate limit on the API server (requests a
// second, and the burst above it).
const (
	kubernetesQPS   = 100
	kubernetesBurst = 200
)

// kubernetesRuntimes connects to the cluster of cfg.Kubernetes and returns
// one runtime per configured RuntimeClass, in name order.
//
// # Errors
// When the kubeconfig cannot be read or options are invalid. An API server
// that does not answer is not an error: the runtimes answer 503 until it
// does.
func kubernetesRuntimes(ctx context.Context, cfg *config, log *slog.Logger) (*k8s.Cluster, []runtimes.Runtime, error) {
	kc := cfg.Kubernetes
	var rc *rest.Config
	var err error
	if kc.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", kc.Kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes: %w", err)
	}
	mem, err := server.ParseQuantityBytes(kc.DefaultMemory)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes.default_memory: %w", err)
	}
	var from []netip.Prefix
	for _, s := range kc.IngressFrom {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, nil, fmt.Errorf("kubernetes.ingress_from: %w", err)
		}
		from = append(from, p)
	}
	// No call hangs on an API server that does not answer.
	rc.Timeout = kubernetesTimeout
	// client-go's default client-side limit (5 requests a second, bursts
	// of 10) queued a pool claim behind the replicas' own syncs for
	// 0.8 s; the API server's own priority and fairness protects it.
	rc.QPS, rc.Burst = kubernetesQPS, kubernetesBurst
	replica := ""
	if kc.SharedState {
		replica = replicaName(kc)
	}
	c, err := k8s.Open(k8s.Options{Config: rc, Namespace: kc.Namespace, ExecdImage: kc.ExecdImage,
		DefaultMemoryBytes: mem, IngressFrom: from, DNSUpstreams: kc.DNSUpstreams, AllowedHostPaths: cfg.AllowedHostPaths,
		Replica: replica, Access: kc.ExecdAccess, Logger: log})
	if err != nil {
		return nil, nil, err
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
		egress := "hybox-egress in each Pod (runc); no egress policies on gVisor"
		if kc.ExecdAccess == k8s.AccessAPIProxy {
			egress = "none: Pods are reached through the API server, which cannot carry the egress agent's channel"
		}
		log.Info("container sandboxes run as Pods", "namespace", kc.Namespace, "runtimes", classes, "clusterRuntimeClasses", have,
			"access", c.Access(), "egress", egress)
	}
	return c, out, nil
}

// sharedState opens the replicas' shared state on the cluster for the
// runtimes rts (kubernetes.shared_state).
//
// # Errors
// When the API server does not answer or the CRD is missing and cannot be
// installed: a replica without the shared state would keep records the
// others cannot see, so it does not start.
func sharedState(ctx context.Context, cfg *config, c *k8s.Cluster, rts []runtimes.Runtime, log *slog.Logger) (st *k8s.State, id, address string, err error) {
	kc := cfg.Kubernetes
	if address, err = replicaAddress(cfg); err != nil {
		return nil, "", "", err
	}
	id = replicaName(kc)
	var names []string
	for _, rt := range rts {
		names = append(names, rt.Name())
	}
	ctx, cancel := context.WithTimeout(ctx, 2*kubernetesTimeout)
	defer cancel()
	st, err = c.SharedState(ctx, k8s.StateOptions{Runtimes: names, Identity: id, LeaseDuration: kc.LeaseDuration.Duration})
	if err != nil {
		return nil, "", "", fmt.Errorf("kubernetes.shared_state: %w", err)
	}
	log.Info("Pod sandboxes' records are shared with the other replicas through the cluster", "replica", id, "address", address,
		"resource", k8s.SandboxGVR.Resource+"."+k8s.SandboxGVR.Group, "namespace", kc.Namespace, "runtimes", names)
	return st, id, address, nil
}
