package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/internal/shared"
	"github.com/hybox-dev/hybox/internal/typescript"
	"github.com/hybox-dev/hybox/policy/egress"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/runtimes/oci"
	"github.com/hybox-dev/hybox/runtimes/wasm"
	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/server"
	"github.com/hybox-dev/hybox/vault"
)

// newServeCmd returns `hybox serve`.
func newServeCmd() *cobra.Command {
	var (
		cfgPath, addr, dataDir, apiKey, apiKeyFile, guestDir, publicHost string
		containerdAddr, runscBinary, execdBinary, ingressDomain          string
		kubernetes, shareState                                           bool
		kubeconfig, sharedDir                                            string
		insecure                                                         bool
		vaultKeyFile, egressRootCAFile                                   string
		dnsUpstreams                                                     []string
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the hybox server (lifecycle API, execd, one-shot runs)",
		Long: "Run the hybox server. Settings come from the embedded defaults, then the config file\n" +
			"(--config or HYBOX_CONFIG), then HYBOX_* environment variables, then flags.\n" +
			"An API key is required unless --insecure is given explicitly.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfgPath == "" {
				cfgPath = os.Getenv("HYBOX_CONFIG")
			}
			cfg, err := loadConfig(cfgPath, os.Getenv)
			if err != nil {
				return err
			}
			f := cmd.Flags()
			if f.Changed("addr") {
				cfg.Addr = addr
			}
			if f.Changed("data-dir") {
				cfg.DataDir = dataDir
			}
			if f.Changed("api-key") {
				cfg.APIKey = apiKey
			}
			if f.Changed("api-key-file") {
				cfg.APIKeyFile = apiKeyFile
			}
			if f.Changed("guest-dir") {
				cfg.Wasm.GuestDir = guestDir
			}
			if f.Changed("public-host") {
				cfg.PublicHost = publicHost
			}
			if f.Changed("containerd") {
				cfg.OCI.Address = containerdAddr
			}
			if f.Changed("kubernetes") {
				cfg.Kubernetes.Enabled = kubernetes
			}
			if f.Changed("kubeconfig") {
				cfg.Kubernetes.Kubeconfig, cfg.Kubernetes.Enabled = kubeconfig, true
			}
			if f.Changed("shared-state") {
				cfg.Kubernetes.SharedState = shareState
			}
			if f.Changed("shared-dir") {
				cfg.Kubernetes.SharedDir = sharedDir
			}
			if f.Changed("runsc-binary") {
				cfg.OCI.RunscBinary = runscBinary
			}
			if f.Changed("execd-binary") {
				cfg.OCI.ExecdBinary = execdBinary
			}
			if f.Changed("ingress-domain") {
				cfg.IngressDomain = ingressDomain
			}
			if f.Changed("insecure") {
				cfg.Insecure = insecure
			}
			if f.Changed("vault-key-file") {
				cfg.Vault.KeyFile = vaultKeyFile
			}
			if f.Changed("dns-upstream") {
				cfg.Egress.DNSUpstreams = dnsUpstreams
			}
			if f.Changed("egress-root-ca-file") {
				cfg.Egress.RootCAFile = egressRootCAFile
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return serve(ctx, cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfgPath, "config", "", "TOML config file (env HYBOX_CONFIG)")
	f.StringVar(&addr, "addr", "", "listen address HOST:PORT (env HYBOX_ADDR; default 127.0.0.1:8080)")
	f.StringVar(&dataDir, "data-dir", "", "data directory (env HYBOX_DATA_DIR; default /var/lib/hybox)")
	f.StringVar(&apiKey, "api-key", "", "API key clients send in OPEN-SANDBOX-API-KEY (env HYBOX_API_KEY)")
	f.StringVar(&apiKeyFile, "api-key-file", "", "file holding the API key (env HYBOX_API_KEY_FILE)")
	f.StringVar(&guestDir, "guest-dir", "", "directory with python.wasm and quickjs.wasm (env HYBOX_GUEST_DIR)")
	f.StringVar(&publicHost, "public-host", "", "host[:port] written into sandbox endpoints (env HYBOX_PUBLIC_HOST)")
	f.StringVar(&containerdAddr, "containerd", "", "containerd socket for container sandboxes (env HYBOX_CONTAINERD_ADDRESS; empty = wasm only)")
	f.BoolVar(&kubernetes, "kubernetes", false, "container sandboxes as Pods of a Kubernetes cluster ([kubernetes] in the config; the local containerd is then not used)")
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of that cluster; implies --kubernetes (env HYBOX_KUBECONFIG; default: in-cluster)")
	f.BoolVar(&shareState, "shared-state", false, "keep Pod sandboxes' records in the cluster so that several servers serve them all ([kubernetes] shared_state)")
	f.StringVar(&sharedDir, "shared-dir", "", "a directory every replica mounts, where wasm sandboxes live so that another replica takes them over when theirs is gone ([kubernetes] shared_dir, env HYBOX_SHARED_DIR; needs --shared-state)")
	f.StringVar(&runscBinary, "runsc-binary", "", "gVisor's runsc, built by scripts/containers/build-gvisor.sh, for runsc sandboxes (env HYBOX_RUNSC_BINARY)")
	f.StringVar(&execdBinary, "execd-binary", "", "static hybox-execd binary (env HYBOX_EXECD_BINARY; default beside hybox)")
	f.StringVar(&ingressDomain, "ingress-domain", "", "route <id>-<port>.<domain> to sandbox ports (env HYBOX_INGRESS_DOMAIN)")
	f.BoolVar(&insecure, "insecure", false, "serve WITHOUT authentication (env HYBOX_INSECURE)")
	f.StringVar(&vaultKeyFile, "vault-key-file", "", "key sealing credential vaults, 32 bytes in hex or base64 (env HYBOX_VAULT_KEY_FILE, or the key itself in HYBOX_VAULT_KEY)")
	f.StringSliceVar(&dnsUpstreams, "dns-upstream", nil, "resolver host:port for sandboxes' allowed names, repeatable (env HYBOX_DNS_UPSTREAMS; default: the host's)")
	f.StringVar(&egressRootCAFile, "egress-root-ca-file", "", "extra CAs (PEM) trusted for upstream TLS when hybox injects credentials (env HYBOX_EGRESS_ROOT_CA_FILE)")
	return cmd
}

// findGuestDir picks the guest directory: configured, beside the binary,
// or build/guests under the working directory.
func findGuestDir(configured string) string {
	if configured != "" {
		return configured
	}
	var candidates []string
	if exe, err := os.Executable(); err == nil {
		d := filepath.Dir(exe)
		candidates = append(candidates, filepath.Join(d, "guests"), filepath.Join(d, "..", "share", "hybox", "guests"), filepath.Join(d, "..", "build", "guests"))
	}
	candidates = append(candidates, filepath.Join("build", "guests"))
	for _, c := range candidates {
		if _, err := os.Stat(filepath.Join(c, engine.Python.Name)); err == nil {
			return c
		}
	}
	return filepath.Join("build", "guests")
}

func parseLevel(s string) slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return slog.LevelInfo
	}
	return l
}

func serve(ctx context.Context, cfg *config) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: parseLevel(cfg.LogLevel)}))
	key, err := cfg.resolveAPIKey()
	if err != nil {
		return err
	}
	if key == "" && !cfg.Insecure {
		return fmt.Errorf("refusing to start without an API key: set --api-key, --api-key-file, HYBOX_API_KEY or api_key in the config, or pass --insecure to serve without authentication")
	}
	if cfg.Insecure {
		log.Warn("serving WITHOUT authentication (--insecure)")
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	guestDir := findGuestDir(cfg.Wasm.GuestDir)
	eng, err := engine.New(ctx, engine.Options{GuestDir: guestDir, CacheDir: filepath.Join(cfg.DataDir, "wazero-cache")})
	if err != nil {
		return err
	}
	defer eng.Close(context.Background())
	defMem, err := server.ParseQuantityBytes(cfg.Wasm.DefaultMemory)
	if err != nil {
		return fmt.Errorf("wasm.default_memory: %w", err)
	}
	outLimit, err := server.ParseQuantityBytes(cfg.Wasm.OutputLimit)
	if err != nil {
		return fmt.Errorf("wasm.output_limit: %w", err)
	}
	// Replicas that take over each other's wasm sandboxes clone Python
	// contexts from one memory image, so that a context saved by one
	// restores in another.
	imageDir := ""
	if cfg.Kubernetes.SharedDir != "" {
		imageDir = filepath.Join(cfg.Kubernetes.SharedDir, "images")
	}
	start := time.Now()
	wrt, stopGuests, err := wasm.Setup(ctx, wasm.SetupOptions{
		Engine: eng, PythonPool: cfg.Wasm.PythonPool, PythonReady: cfg.Wasm.PythonReady, DefaultMemoryBytes: defMem, OutputLimitBytes: outLimit,
		AllowedHostPaths: cfg.AllowedHostPaths, ImageDir: imageDir,
		Exec: execd.Options{
			Limiter:          execd.NewLimiter(cfg.Wasm.MaxConcurrent, cfg.Wasm.QueueWait.Duration),
			ExecTimeout:      cfg.Wasm.ExecTimeout.Duration,
			OutputLimitBytes: outLimit,
			TypeScript:       typescript.Transpiler{},
			Logger:           log,
		},
	})
	if err != nil {
		return err
	}
	defer stopGuests()
	log.Info("guests ready", "dir", guestDir, "python", wrt.PythonGuest(), "took", time.Since(start).Round(time.Millisecond))
	rts := []runtimes.Runtime{wrt}
	var images runtimes.ImageStore
	var sharedStore shared.Store
	var replica, replicaAddr string
	if cfg.Kubernetes.Enabled {
		// Pods instead of local containers. A cluster that does not answer
		// is served anyway (503 until it does); a bad configuration leaves
		// the wasm tier serving alone.
		kc, krts, err := kubernetesRuntimes(ctx, cfg, log)
		if err != nil {
			log.Warn("container sandboxes on Kubernetes are unavailable; serving wasm sandboxes only", "err", err)
		}
		rts = append(rts, krts...)
		if cfg.Kubernetes.SharedState {
			if kc == nil {
				return fmt.Errorf("kubernetes.shared_state needs the Kubernetes backend: %w", err)
			}
			st, name, address, err := sharedState(ctx, cfg, kc, krts, log)
			if err != nil {
				return err
			}
			defer st.Close()
			sharedStore, replica, replicaAddr = st, name, address
		}
	} else if cfg.OCI.Address != "" {
		ob, err := startOCI(ctx, cfg, log)
		if err != nil {
			log.Warn("container sandboxes are unavailable; serving wasm sandboxes only", "err", err)
		} else {
			defer ob.Close()
			rts = append(rts, ob.Runtimes()...)
			images = ob
			switch rc, err := ob.Runsc(); {
			case rc != nil:
				log.Info("gVisor sandboxes ready", "runtime", "runsc", "platform", rc.Platform, "runsc", rc.Binary)
			case err != nil:
				log.Warn("gVisor sandboxes are unavailable; serving runc only", "err", err)
			default:
				log.Info("gVisor sandboxes are off: no runsc binary configured (--runsc-binary)")
			}
		}
	}
	rules := append(append([]runtimes.ImageRule{}, cfg.ImageRules...), runtimes.BuiltinImageRules...)
	router, err := runtimes.NewSelector(rts, rules, cfg.OCI.DefaultRuntime)
	if err != nil {
		return err
	}
	eg, vaultKey, err := egressSetup(cfg, log)
	if err != nil {
		return err
	}
	if cfg.Kubernetes.SharedDir != "" && sharedStore == nil {
		return errors.New("kubernetes.shared_dir needs kubernetes.shared_state (--shared-state)")
	}
	var pools []api.CreatePoolRequest
	for _, p := range cfg.Pools {
		pools = append(pools, p.request())
	}
	srv, err := server.New(ctx, server.Options{
		DataDir: cfg.DataDir, APIKey: key, Insecure: cfg.Insecure, Runtimes: router,
		PublicHost: cfg.PublicHost, ReapInterval: cfg.ReapInterval.Duration, Logger: log, Images: images,
		IngressDomain: cfg.IngressDomain, Egress: eg, VaultKey: vaultKey,
		Pools: pools, Failpoint: os.Getenv("HYBOX_TEST_FAILPOINT"),
		Shared: sharedStore, Replica: replica, ReplicaAddress: replicaAddr, SharedDir: cfg.Kubernetes.SharedDir,
	})
	if err != nil {
		return err
	}
	defer srv.Close(context.Background())
	l, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	log.Info("hybox listening", "addr", l.Addr().String(), "dataDir", cfg.DataDir, "runtimes", router.Names())
	err = srv.Serve(ctx, l)
	if ctx.Err() != nil {
		// The deferred closes run after this line: the server, the
		// container backend's connection, the guests. Containers keep
		// running under their shims and are re-attached on the next start.
		log.Info("hybox shutting down: stop signal received; sandboxes are kept and re-attached on the next start", "err", err)
	}
	return err
}

// startOCI connects the container backend.
func startOCI(ctx context.Context, cfg *config, log *slog.Logger) (*oci.Containerd, error) {
	execdBin := cfg.OCI.ExecdBinary
	if execdBin == "" {
		if exe, err := os.Executable(); err == nil {
			execdBin = filepath.Join(filepath.Dir(exe), "hybox-execd")
		}
	}
	mem, err := server.ParseQuantityBytes(cfg.OCI.DefaultMemory)
	if err != nil {
		return nil, fmt.Errorf("oci.default_memory: %w", err)
	}
	return oci.New(ctx, oci.Options{
		Address: cfg.OCI.Address, Namespace: cfg.OCI.Namespace, ExecdBinary: execdBin,
		RuncBinary: cfg.OCI.RuncBinary, RunscBinary: cfg.OCI.RunscBinary, RunscPlatform: cfg.OCI.RunscPlatform,
		CNIPluginDir: cfg.OCI.CNIPluginDir, Subnet: cfg.OCI.Subnet,
		StateDir: filepath.Join(cfg.DataDir, "oci"), DefaultMemoryBytes: mem, Logger: log,
		AllowedHostPaths: cfg.AllowedHostPaths,
	})
}

// egressSetup builds the egress manager and loads the vault key (nil when
// none is configured: the credential proxy is then off).
func egressSetup(cfg *config, log *slog.Logger) (*egress.Manager, *vault.Key, error) {
	var roots *x509.CertPool
	var pem []byte
	if cfg.Egress.RootCAFile != "" {
		var err error
		pem, err = os.ReadFile(cfg.Egress.RootCAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("egress.root_ca_file: %w", err)
		}
		if roots, err = x509.SystemCertPool(); err != nil {
			roots = x509.NewCertPool()
		}
		if !roots.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("egress.root_ca_file %s: no PEM certificate in it", cfg.Egress.RootCAFile)
		}
	}
	m, err := egress.NewManager(egress.Options{DNSUpstreams: cfg.Egress.DNSUpstreams, RootCAs: roots, RootCAsPEM: pem, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	if cfg.Vault.KeyFile == "" && cfg.Vault.Key == "" {
		log.Warn("credential vault is off: no key (set vault.key_file or HYBOX_VAULT_KEY)")
		return m, nil, nil
	}
	k, err := vault.LoadKey(cfg.Vault.KeyFile, cfg.Vault.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("vault key: %w", err)
	}
	return m, &k, nil
}
