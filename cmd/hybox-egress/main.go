// Command hybox-egress enforces a sandbox's egress policy and credential
// vault inside a network namespace the hybox server cannot enter: a
// Kubernetes Pod's (runtimes/k8s). It runs the server's own code
// (policy/egress: the Controller, its firewall, DNS proxy and credential
// proxy) in the Pod, with CAP_NET_ADMIN, in containers of its own; the
// workload container never has that capability.
//
// Usage:
//
//	hybox-egress init  --config FILE [--firewall nftables|xtables] [-- COMMAND ARGS...]
//	hybox-egress serve --config FILE --listen IP [--firewall nftables|xtables]
//	hybox-egress wait  [--timeout D]
//
// --firewall names the packet filter the Pod's network namespace has:
// the kernel's nftables (the default: runc and other runtimes that share
// the node's kernel), or xtables, the iptables of gVisor's netstack
// (policy/xt), which also needs CAP_NET_RAW and runsc's net-raw option.
// The backend that makes the Pod says which: it knows the Pod's
// RuntimeClass, and a Pod whose firewall cannot be installed fails to
// start, saying why, rather than running with another.
//
// init installs the firewall of the configured state and exits, or, given
// a COMMAND, executes it in its place: the Pod's first init container, so
// that the workload never runs unfenced; its COMMAND is hybox-execd
// --install-to (one init container instead of two saves the Pod a
// kubelet relist, about a second). serve is
// the Pod's native sidecar (an init container with restartPolicy Always):
// it installs the firewall again, serves the DNS proxy on 127.0.0.53:53
// and, with a vault, the credential proxy on 127.0.0.1:15001, and serves
// the control API (HTTPS on IP:controlPort, the certificate and the token
// of the config) over which the server pushes every change of policy and
// vault. wait returns once the DNS proxy answers (the sidecar's postStart
// hook, so that the workload starts only then).
//
// FILE is the AgentConfig (JSON) the server wrote into the sandbox's
// Secret. It is built with CGO_ENABLED=0 as a static binary.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/hybox-dev/hybox/policy/egress"
)

// selfNS is the namespace the agent enforces: its own.
const selfNS = "/proc/self/ns/net"

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: hybox-egress init|serve|wait [flags]")
		return 2
	}
	fs := flag.NewFlagSet("hybox-egress "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	conf := fs.String("config", "", "the agent's configuration (JSON)")
	listen := fs.String("listen", "", "the IP to serve the control API on (the Pod's)")
	timeout := fs.Duration("timeout", 60*time.Second, "wait: how long to wait")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	firewall := fs.String("firewall", egress.NFTables.Name(), "the namespace's packet filter: "+egress.NFTables.Name()+" or "+egress.XTables.Name())
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	var fw egress.FirewallBackend
	switch *firewall {
	case egress.NFTables.Name():
		fw = egress.NFTables
	case egress.XTables.Name():
		fw = egress.XTables
	default:
		fmt.Fprintf(stderr, "hybox-egress: --firewall %q: want %s or %s\n", *firewall, egress.NFTables.Name(), egress.XTables.Name())
		return 2
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(stderr, "hybox-egress: --log-level: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var err error
	switch args[0] {
	case "init":
		if err = initFirewall(*conf, fw, log); err == nil && fs.NArg() > 0 {
			argv := fs.Args()
			err = syscall.Exec(argv[0], argv, os.Environ())
		}
	case "serve":
		err = serve(ctx, *conf, *listen, fw, log)
	case "wait":
		err = wait(ctx, *timeout)
	default:
		fmt.Fprintf(stderr, "hybox-egress: unknown command %q (init, serve, wait)\n", args[0])
		return 2
	}
	if err != nil {
		log.Error("hybox-egress "+args[0], "err", err)
		return 1
	}
	return 0
}

// load reads the configuration and builds the sandbox's controller.
func load(path string, fw egress.FirewallBackend, log *slog.Logger) (*egress.AgentConfig, *egress.Controller, error) {
	if path == "" {
		return nil, nil, errors.New("--config is required")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := egress.ParseAgentConfig(b)
	if err != nil {
		return nil, nil, err
	}
	m, err := cfg.Manager(log, fw)
	if err != nil {
		return nil, nil, err
	}
	c, err := cfg.Controller(m)
	if err != nil {
		return nil, nil, err
	}
	return cfg, c, nil
}

// initFirewall installs the configured state's firewall and exits.
func initFirewall(path string, fw egress.FirewallBackend, log *slog.Logger) error {
	_, c, err := load(path, fw, log)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Install(selfNS); err != nil {
		return err
	}
	log.Info("egress firewall installed", "firewall", fw.Name())
	return nil
}

// serve runs the sidecar until SIGTERM.
func serve(ctx context.Context, path, listen string, fw egress.FirewallBackend, log *slog.Logger) error {
	cfg, c, err := load(path, fw, log)
	if err != nil {
		return err
	}
	defer c.Close()
	ip, err := netip.ParseAddr(listen)
	if err != nil {
		return fmt.Errorf("--listen %q: want the Pod's IP: %w", listen, err)
	}
	agent := egress.NewAgent(cfg, c)
	tc, err := agent.TLSConfig()
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", net.JoinHostPort(ip.String(), strconv.Itoa(int(cfg.ControlPort))))
	if err != nil {
		return err
	}
	// The firewall (its guard on the control port first), then the
	// proxies; the DNS proxy answering is what `wait` waits for.
	if err := c.Enforce(ctx, selfNS); err != nil {
		l.Close()
		return err
	}
	srv := &http.Server{Handler: agent, TLSConfig: tc, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(tls.NewListener(l, tc)) }()
	log.Info("egress agent serving", "sandbox", cfg.ID, "control", l.Addr().String(), "firewall", fw.Name())
	select {
	case <-ctx.Done():
	case err := <-done:
		return err
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// wait returns once the DNS proxy accepts a TCP connection.
func wait(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "tcp", egress.DNSAddr)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the DNS proxy on %s did not answer within %s: %w", egress.DNSAddr, timeout, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
