package main

import (
	_ "embed"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

//go:embed defaults.toml
var defaultsTOML string

// config is the server configuration: embedded defaults, then a TOML file,
// then HYBOX_* environment variables, then flags.
type config struct {
	Addr           string               `toml:"addr"`
	DataDir        string               `toml:"data_dir"`
	APIKey         string               `toml:"api_key"`
	APIKeyFile     string               `toml:"api_key_file"`
	Insecure       bool                 `toml:"insecure"`
	IngressDomain  string               `toml:"ingress_domain"`
	PublicHost     string               `toml:"public_host"`
	DefaultRuntime string               `toml:"default_runtime"` // refused (see loadConfig): OCI.DefaultRuntime replaced it
	ReapInterval   duration             `toml:"reap_interval"`
	LogLevel       string               `toml:"log_level"`
	ImageRules     []runtimes.ImageRule `toml:"image_rules"`
	// AllowedHostPaths are the host directories (and what is below them)
	// that sandboxes of every tier may mount as host volumes.
	AllowedHostPaths []string         `toml:"allowed_host_paths"`
	Wasm             wasmConfig       `toml:"wasm"`
	OCI              ociConfig        `toml:"oci"`
	Egress           egressConfig     `toml:"egress"`
	Vault            vaultConfig      `toml:"vault"`
	Pools            []poolConfig     `toml:"pools"`
	Kubernetes       kubernetesConfig `toml:"kubernetes"`
}

// poolConfig is one [[pools]] entry: a warm pool of containers.
type poolConfig struct {
	Name    string `toml:"name"`
	Image   string `toml:"image"`
	Runtime string `toml:"runtime"` // "" = oci.default_runtime
	// Size is the number of idle members kept (bufferMin = bufferMax =
	// size); the four counts below override it one by one.
	Size      int      `toml:"size"`
	BufferMin *int     `toml:"buffer_min"`
	BufferMax *int     `toml:"buffer_max"`
	PoolMin   *int     `toml:"pool_min"`
	PoolMax   *int     `toml:"pool_max"`
	MaxIdle   duration `toml:"max_idle"` // 0 = members are never replaced for age
	Memory    string   `toml:"memory"`
	CPU       string   `toml:"cpu"`
}

// request is the pool as the API would create it.
func (p poolConfig) request() api.CreatePoolRequest {
	pick := func(v *int, def int) int {
		if v != nil {
			return *v
		}
		return def
	}
	limits := map[string]string{}
	if p.Memory != "" {
		limits["memory"] = p.Memory
	}
	if p.CPU != "" {
		limits["cpu"] = p.CPU
	}
	if len(limits) == 0 {
		limits = nil
	}
	bufMax := pick(p.BufferMax, p.Size)
	return api.CreatePoolRequest{Name: p.Name,
		Template: api.PoolTemplate{Image: api.ImageSpec{URI: p.Image}, Runtime: p.Runtime, ResourceLimits: limits,
			MaxIdleSeconds: int(p.MaxIdle.Seconds())},
		CapacitySpec: api.PoolCapacitySpec{BufferMin: pick(p.BufferMin, p.Size), BufferMax: bufMax,
			PoolMin: pick(p.PoolMin, 0), PoolMax: pick(p.PoolMax, max(bufMax, 1024))}}
}

type egressConfig struct {
	// DNSUpstreams are the resolvers sandboxes' allowed names go to
	// ("host:port"); empty = the host's /etc/resolv.conf.
	DNSUpstreams []string `toml:"dns_upstreams"`
	// RootCAFile is a PEM file of CAs trusted, besides the system's, for
	// upstream TLS when hybox makes a request itself (wasm guests, vault
	// injection).
	RootCAFile string `toml:"root_ca_file"`
}

type vaultConfig struct {
	// KeyFile holds the 32-byte key (hex or base64) that seals credential
	// vaults at rest. Without a key the credential proxy is off.
	KeyFile string `toml:"key_file"`
	// Key is the key itself; set it through HYBOX_VAULT_KEY, not a file.
	Key string `toml:"-"`
}

type ociConfig struct {
	Address       string `toml:"address"`
	Namespace     string `toml:"namespace"`
	ExecdBinary   string `toml:"execd_binary"`
	RuncBinary    string `toml:"runc_binary"`
	RunscBinary   string `toml:"runsc_binary"`
	CNIPluginDir  string `toml:"cni_plugin_dir"`
	Subnet        string `toml:"subnet"`
	DefaultMemory string `toml:"default_memory"`
	// AllowedHostPaths is the old, container-only spelling of the
	// top-level allowed_host_paths; still read, and added to it.
	AllowedHostPaths []string `toml:"allowed_host_paths"`
	// RunscPlatform is gVisor's platform: systrap, ptrace, or "" to probe
	// (systrap where it works, else ptrace).
	RunscPlatform string `toml:"runsc_platform"`
	// DefaultRuntime is the container runtime of OCI images that no
	// runtime extension or image rule names (runc or runsc; "" = runc).
	DefaultRuntime string `toml:"default_runtime"`
}

type wasmConfig struct {
	GuestDir      string   `toml:"guest_dir"`
	PythonPool    int      `toml:"python_pool"`
	PythonReady   int      `toml:"python_ready"`
	DefaultMemory string   `toml:"default_memory"`
	ExecTimeout   duration `toml:"exec_timeout"`
	OutputLimit   string   `toml:"output_limit"`
	MaxConcurrent int      `toml:"max_concurrent"`
	QueueWait     duration `toml:"queue_wait"`
}

// duration is a time.Duration written as "5s" in TOML.
type duration struct{ time.Duration }

func (d *duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// loadConfig reads the embedded defaults, then path (if any), then env.
func loadConfig(path string, getenv func(string) string) (*config, error) {
	var c config
	if _, err := toml.Decode(defaultsTOML, &c); err != nil {
		return nil, fmt.Errorf("embedded defaults: %w", err)
	}
	if path != "" {
		md, err := toml.DecodeFile(path, &c)
		if err != nil {
			return nil, fmt.Errorf("config %s: %w", path, err)
		}
		if undec := md.Undecoded(); len(undec) > 0 {
			keys := make([]string, len(undec))
			for i, k := range undec {
				keys[i] = k.String()
			}
			return nil, fmt.Errorf("config %s: unknown keys: %s", path, strings.Join(keys, ", "))
		}
	}
	envs := []struct {
		name string
		set  func(string) error
	}{
		{"HYBOX_ADDR", func(v string) error { c.Addr = v; return nil }},
		{"HYBOX_DATA_DIR", func(v string) error { c.DataDir = v; return nil }},
		{"HYBOX_API_KEY", func(v string) error { c.APIKey = v; return nil }},
		{"HYBOX_API_KEY_FILE", func(v string) error { c.APIKeyFile = v; return nil }},
		{"HYBOX_PUBLIC_HOST", func(v string) error { c.PublicHost = v; return nil }},
		{"HYBOX_INGRESS_DOMAIN", func(v string) error { c.IngressDomain = v; return nil }},
		{"HYBOX_DEFAULT_RUNTIME", func(v string) error { c.OCI.DefaultRuntime = v; return nil }},
		{"HYBOX_GUEST_DIR", func(v string) error { c.Wasm.GuestDir = v; return nil }},
		{"HYBOX_LOG_LEVEL", func(v string) error { c.LogLevel = v; return nil }},
		{"HYBOX_CONTAINERD_ADDRESS", func(v string) error { c.OCI.Address = v; return nil }},
		{"HYBOX_RUNSC_BINARY", func(v string) error { c.OCI.RunscBinary = v; return nil }},
		{"HYBOX_RUNSC_PLATFORM", func(v string) error { c.OCI.RunscPlatform = v; return nil }},
		{"HYBOX_EXECD_BINARY", func(v string) error { c.OCI.ExecdBinary = v; return nil }},
		{"HYBOX_VAULT_KEY", func(v string) error { c.Vault.Key = v; return nil }},
		{"HYBOX_VAULT_KEY_FILE", func(v string) error { c.Vault.KeyFile = v; return nil }},
		{"HYBOX_DNS_UPSTREAMS", func(v string) error {
			c.Egress.DNSUpstreams = strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' })
			return nil
		}},
		{"HYBOX_EGRESS_ROOT_CA_FILE", func(v string) error { c.Egress.RootCAFile = v; return nil }},
		{"HYBOX_ALLOWED_HOST_PATHS", func(v string) error {
			c.AllowedHostPaths = strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ':' })
			return nil
		}},
		{"HYBOX_KUBECONFIG", func(v string) error { c.Kubernetes.Kubeconfig = v; return nil }},
		{"HYBOX_REPLICA", func(v string) error { c.Kubernetes.Replica = v; return nil }},
		{"HYBOX_REPLICA_ADDRESS", func(v string) error { c.Kubernetes.ReplicaAddress = v; return nil }},
		{"HYBOX_SHARED_DIR", func(v string) error { c.Kubernetes.SharedDir = v; return nil }},
		{"HYBOX_INSECURE", func(v string) error {
			b, err := strconv.ParseBool(v)
			c.Insecure = b
			return err
		}},
	}
	for _, e := range envs {
		if v := getenv(e.name); v != "" {
			if err := e.set(v); err != nil {
				return nil, fmt.Errorf("%s: %w", e.name, err)
			}
		}
	}
	if c.DefaultRuntime != "" {
		return nil, fmt.Errorf("config: default_runtime = %q is no longer read: an OCI image goes to the container runtime oci.default_runtime (runc unless set), and a sandbox runs in wasm when its image is wasm://..., a code-interpreter image or matches an image rule; move the setting to [oci] default_runtime, or add an [[image_rules]] entry", c.DefaultRuntime)
	}
	c.AllowedHostPaths = append(c.AllowedHostPaths, c.OCI.AllowedHostPaths...)
	c.OCI.AllowedHostPaths = nil
	return &c, nil
}

// resolveAPIKey returns the key from api_key or api_key_file.
func (c *config) resolveAPIKey() (string, error) {
	if c.APIKey != "" {
		return c.APIKey, nil
	}
	if c.APIKeyFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(c.APIKeyFile)
	if err != nil {
		return "", fmt.Errorf("api key file: %w", err)
	}
	key := strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
	if key == "" {
		return "", fmt.Errorf("api key file %s is empty", c.APIKeyFile)
	}
	return key, nil
}
