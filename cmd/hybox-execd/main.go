// Command hybox-execd is the in-sandbox daemon of container sandboxes. It
// is mounted read-only into every container and started as its first
// process: it reaps zombies (it is init), starts the user's entrypoint, and
// serves the execd API (commands, sessions, code, files, metrics,
// terminals) over OS processes on a unix socket, which the hybox server
// reaches through a per-sandbox host directory, and on TCP 44772 inside
// the sandbox.
//
// Usage:
//
//	hybox-execd [--listen-unix PATH] [--listen-tcp ADDR] [--root DIR]
//	            [--access-token-file FILE] [--subreaper] [--pooled]
//	            [-- ENTRYPOINT ARGS...]
//	hybox-execd --install-to PATH
//
// With --pooled the container is a warm-pool member: only the unix socket
// is served and nothing else starts until the server claims it (see
// execd.ClaimPath), which gives it its environment, files and entrypoint.
// A pooled daemon without a unix socket (a Kubernetes Pod, which the
// server reaches on its IP only) serves TCP at once, claim routes
// included, and requires its access token on every route.
//
// --install-to copies the binary itself to PATH and exits: the init
// container of a Kubernetes sandbox (runtimes/k8s) runs it from the
// hybox-execd image to put execd into a volume the workload container
// shares, since that image holds nothing else (no shell, no cp).
//
// It uses the standard library and a pty library only and is built with
// CGO_ENABLED=0 as a static binary.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/execd/osbackend"
	"github.com/hybox-dev/hybox/internal/typescript"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// config is the parsed command line.
type config struct {
	listenUnix string
	listenTCP  string
	listenCI   string
	root       string
	tokenFile  string
	subreaper  bool
	stopGrace  time.Duration
	logLevel   string
	warmShell  bool
	pooled     bool
	installTo  string
	entrypoint []string
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("hybox-execd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.listenUnix, "listen-unix", "/run/hybox/execd.sock", "unix socket to serve on (\"\" disables)")
	fs.StringVar(&c.listenTCP, "listen-tcp", "0.0.0.0:44772", "TCP address to serve on (\"\" disables)")
	fs.StringVar(&c.listenCI, "listen-interpreter", "127.0.0.1:44771", "TCP address that answers the OpenSandbox code-interpreter readiness probe (the Jupyter port); \"\" disables")
	fs.StringVar(&c.root, "root", "/", "root of the files API and of guest paths")
	fs.StringVar(&c.tokenFile, "access-token-file", "", "file holding the X-EXECD-ACCESS-TOKEN every request must carry")
	fs.BoolVar(&c.subreaper, "subreaper", false, "reap orphans as a child subreaper even when not PID 1")
	fs.DurationVar(&c.stopGrace, "stop-grace", 10*time.Second, "how long the entrypoint has to exit after SIGTERM")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&c.warmShell, "warm-shell", true, "keep a bash started ahead of time for the next command (saves a fork+exec per command; false = every command is a new bash -c)")
	fs.BoolVar(&c.pooled, "pooled", false, "start as a warm-pool member: serve the unix socket only and wait to be claimed before listening on TCP and starting an entrypoint (without --listen-unix: serve TCP, claim routes included, behind the access token)")
	fs.StringVar(&c.installTo, "install-to", "", "copy this binary to PATH and exit (an init container's job)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.entrypoint = fs.Args()
	if c.installTo != "" {
		return c, nil
	}
	if c.listenUnix == "" && c.listenTCP == "" {
		return c, errors.New("nothing to listen on: set --listen-unix or --listen-tcp")
	}
	if c.pooled && c.listenUnix == "" && (c.listenTCP == "" || c.tokenFile == "") {
		return c, errors.New("--pooled needs --listen-unix, or --listen-tcp with --access-token-file: a pool member is claimed over its unix socket, or over TCP behind its token")
	}
	if c.pooled && len(c.entrypoint) > 0 {
		return c, errors.New("--pooled takes no entrypoint: the claim gives it")
	}
	return c, nil
}

func run(args []string, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "hybox-execd:", err)
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.logLevel)); err != nil {
		fmt.Fprintln(stderr, "hybox-execd: --log-level:", err)
		return 2
	}
	if cfg.installTo != "" {
		if err := installSelf(cfg.installTo); err != nil {
			fmt.Fprintln(stderr, "hybox-execd: --install-to:", err)
			return 1
		}
		return 0
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if err := serve(cfg, log); err != nil {
		log.Error("hybox-execd failed", "err", err)
		return 1
	}
	return 0
}

func serve(cfg config, log *slog.Logger) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Signals first, so that none is lost while starting.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)

	var reaper *osbackend.Reaper
	if os.Getpid() == 1 || cfg.subreaper {
		if os.Getpid() != 1 {
			if err := setChildSubreaper(); err != nil {
				return fmt.Errorf("become a child subreaper: %w", err)
			}
		}
		reaper = osbackend.NewReaper(log)
		go reaper.Run(ctx)
		log.Debug("reaping orphans", "pid", os.Getpid())
	}

	token := ""
	if cfg.tokenFile != "" {
		b, err := os.ReadFile(cfg.tokenFile)
		if err != nil {
			return fmt.Errorf("access token: %w", err)
		}
		token = strings.TrimSpace(string(b))
		if token == "" {
			return fmt.Errorf("access token file %s is empty", cfg.tokenFile)
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		wd = cfg.root
	}
	backend, err := osbackend.New(osbackend.Options{
		RootDir: cfg.root, Workdir: wd, Env: os.Environ(), Reaper: reaper, Logger: log,
		WarmShell: cfg.warmShell,
	})
	if err != nil {
		return err
	}
	defer backend.Close()
	handler, err := execd.New(execd.Options{Executor: backend, AccessToken: token, Logger: log,
		TypeScript: typescript.Transpiler{}})
	if err != nil {
		return err
	}
	defer handler.Close()

	var listeners []net.Listener
	var lmu sync.Mutex // listeners and entry, which a claim adds to
	defer func() {
		lmu.Lock()
		defer lmu.Unlock()
		for _, l := range listeners {
			l.Close()
		}
	}()
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 30 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	var served sync.WaitGroup
	serveOn := func(srv *http.Server, l net.Listener) {
		lmu.Lock()
		listeners = append(listeners, l)
		lmu.Unlock()
		served.Add(1)
		go func() {
			defer served.Done()
			log.Info("serving execd", "network", l.Addr().Network(), "addr", l.Addr().String())
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("serve", "addr", l.Addr().String(), "err", err)
			}
		}()
	}
	// claimOverTCP: a pooled daemon with no unix socket is claimed on TCP.
	claimOverTCP := cfg.pooled && cfg.listenUnix == ""
	// startTCP listens on the TCP addresses: at once, or when claimed
	// (then only the interpreter port, when claims came over TCP).
	startTCP := func(claimed bool) error {
		if cfg.listenTCP != "" && !(claimed && claimOverTCP) {
			l, err := net.Listen("tcp", cfg.listenTCP)
			if err != nil {
				return fmt.Errorf("listen on %s: %w", cfg.listenTCP, err)
			}
			serveOn(srv, l)
		}
		// The official code-interpreter SDK checks that something accepts
		// connections on the Jupyter port before it runs code; here the
		// interpreters are served by execd itself, so execd answers there too.
		if cfg.listenCI != "" {
			if l, err := net.Listen("tcp", cfg.listenCI); err != nil {
				log.Warn("interpreter readiness port unavailable", "addr", cfg.listenCI, "err", err)
			} else {
				serveOn(srv, l)
			}
		}
		return nil
	}

	var entry *entrypoint
	cl := &claimer{state: execd.ClaimClaimed}
	if cfg.pooled {
		cl.state = execd.ClaimIdle
	}
	cl.personalise = func(req execd.ClaimRequest) error {
		for _, f := range req.Files {
			if err := writeClaimFile(f); err != nil {
				return err
			}
		}
		env := mergeEnv(os.Environ(), req.Env)
		backend.SetEnv(env)
		if err := startTCP(true); err != nil {
			return err
		}
		if len(req.Entrypoint) > 0 {
			// Started beside the answer, as at boot, where execd serves
			// while the entrypoint starts: its fork+exec (dear under
			// gVisor) is not on the claim's path.
			go func() {
				e, err := startEntrypoint(req.Entrypoint, env, reaper, log)
				if err != nil {
					log.Error("entrypoint did not start", "argv", req.Entrypoint, "err", err)
					return // the sandbox stays usable through execd
				}
				lmu.Lock()
				entry = e
				lmu.Unlock()
			}()
		}
		log.Info("claimed", "env", len(req.Env), "files", len(req.Files), "entrypoint", req.Entrypoint)
		return nil
	}
	if claimOverTCP {
		// The claim routes behind the token, like the rest of the API.
		cl.token = token
		srv.Handler = cl.routes(handler)
		if err := startTCP(false); err != nil {
			return err
		}
	}
	if cfg.listenUnix != "" {
		l, err := listenUnix(cfg.listenUnix)
		if err != nil {
			return err
		}
		unixSrv := &http.Server{Handler: cl.routes(handler), ReadHeaderTimeout: 30 * time.Second, ErrorLog: srv.ErrorLog}
		defer func() { _ = unixSrv.Close() }()
		serveOn(unixSrv, l)
	}
	if !cfg.pooled {
		if err := startTCP(false); err != nil {
			return err
		}
		if len(cfg.entrypoint) > 0 {
			entry, err = startEntrypoint(cfg.entrypoint, nil, reaper, log)
			if err != nil {
				// The sandbox stays usable through execd; the failure is logged.
				log.Error("entrypoint did not start", "argv", cfg.entrypoint, "err", err)
			}
		}
	}

	sig := <-sigs
	log.Info("stopping", "signal", sig.String())
	lmu.Lock()
	e := entry
	lmu.Unlock()
	if e != nil {
		e.stop(sig.(syscall.Signal), cfg.stopGrace)
	}
	shutdownCtx, cancelShutdown := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelShutdown()
	handler.Close()
	_ = srv.Shutdown(shutdownCtx)
	lmu.Lock()
	for _, l := range listeners {
		l.Close()
	}
	lmu.Unlock()
	served.Wait()
	if cfg.listenUnix != "" {
		_ = os.Remove(cfg.listenUnix)
	}
	return nil
}

// installSelf copies the running binary to path (mode 0755), through a
// temporary file beside it, so that path is never half-written.
func installSelf(path string) error {
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		return err
	}
	defer self.Close()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".hybox-execd-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, self); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// listenUnix listens on a unix socket, replacing a stale socket file.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	if st, err := os.Lstat(path); err == nil && st.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(path)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	// Restrict the socket to its owner and group where the filesystem
	// allows it; gVisor's host-backed sockets refuse chmod, and the
	// directory holding the socket is private to hybox on the host anyway.
	if err := os.Chmod(path, 0o660); err != nil {
		slog.Warn("cannot restrict the socket's mode", "path", path, "err", err)
	}
	return l, nil
}

// setChildSubreaper makes orphaned descendants children of this process.
func setChildSubreaper() error {
	const prSetChildSubreaper = 36
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		return e
	}
	return nil
}

// entrypoint is the user's main process.
type entrypoint struct {
	pgid int
	done chan struct{} // closed when it exited
	log  *slog.Logger
}

// startEntrypoint starts argv in its own process group with this process's
// stdio and env (nil = this process's environment).
func startEntrypoint(argv, env []string, reaper *osbackend.Reaper, log *slog.Logger) (*entrypoint, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	e := &entrypoint{done: make(chan struct{}), log: log}
	var status <-chan syscall.WaitStatus
	if reaper != nil {
		ch, err := reaper.Start(cmd, cmd.Start)
		if err != nil {
			return nil, err
		}
		status = ch
	} else {
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		ch := make(chan syscall.WaitStatus, 1)
		go func() {
			st, err := cmd.Process.Wait()
			if err != nil || st == nil {
				ch <- syscall.WaitStatus(0xff << 8)
				return
			}
			ch <- st.Sys().(syscall.WaitStatus)
		}()
		status = ch
	}
	e.pgid = cmd.Process.Pid
	log.Info("entrypoint started", "argv", argv, "pid", e.pgid)
	go func() {
		ws := <-status
		log.Info("entrypoint exited", "pid", e.pgid, "status", describe(ws))
		close(e.done)
	}()
	return e, nil
}

// stop forwards sig to the entrypoint's group and waits up to grace, then
// kills the group.
func (e *entrypoint) stop(sig syscall.Signal, grace time.Duration) {
	select {
	case <-e.done:
		return
	default:
	}
	_ = syscall.Kill(-e.pgid, sig)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-e.done:
	case <-t.C:
		e.log.Warn("entrypoint did not exit in time; killing it", "pid", e.pgid, "grace", grace)
		_ = syscall.Kill(-e.pgid, syscall.SIGKILL)
		select {
		case <-e.done:
		case <-time.After(2 * time.Second):
		}
	}
}

func describe(ws syscall.WaitStatus) string {
	switch {
	case ws.Exited():
		return fmt.Sprintf("exit code %d", ws.ExitStatus())
	case ws.Signaled():
		return "killed by " + ws.Signal().String()
	default:
		return fmt.Sprintf("status %#x", uint32(ws))
	}
}
