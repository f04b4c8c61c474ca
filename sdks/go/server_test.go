package hybox_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	hybox "github.com/hybox-dev/hybox/sdks/go"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

// The SDK's tests run against a real `hybox serve`: the binary that `make
// build` writes to bin/hybox (HYBOX_BIN, set by the Makefile), with the
// guests of build/guests (HYBOX_GUEST_DIR). Without the binary they skip,
// unless CI or HYBOX_REQUIRE_SDK_SERVER is set: then they fail.

// testServer is a running hybox serve process.
type testServer struct {
	URL    string // http://127.0.0.1:PORT
	APIKey string
}

// servers holds the servers of the test binary, one per configuration,
// started on first use and stopped by TestMain.
type servers struct {
	mu    sync.Mutex
	byCfg map[string]*serverProc
	dir   string
}

type serverProc struct {
	srv  *testServer
	err  error
	cmd  *exec.Cmd
	done chan struct{}
}

var shared = &servers{byCfg: map[string]*serverProc{}}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "hybox-sdk-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared.dir = dir
	code := m.Run()
	shared.stopAll()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func repoRoot() string {
	wd, _ := os.Getwd()
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}

// binary returns the hybox binary or skips (fails under CI) without it.
func binary(tb testing.TB) string {
	tb.Helper()
	bin := os.Getenv("HYBOX_BIN")
	if bin == "" {
		bin = filepath.Join(repoRoot(), "bin", "hybox")
	}
	if _, err := os.Stat(bin); err != nil {
		msg := fmt.Sprintf("no hybox binary at %s (run `make build`, or set HYBOX_BIN): the SDK's tests need a real server", bin)
		if os.Getenv("CI") != "" || os.Getenv("HYBOX_REQUIRE_SDK_SERVER") != "" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	return bin
}

// server returns the shared server of the default configuration: an API
// key, a credential-vault key, the wasm runtime.
func server(tb testing.TB) *testServer { return serverWith(tb, "") }

// serverWith returns the shared server started with extra TOML
// configuration.
func serverWith(tb testing.TB, extraTOML string) *testServer {
	tb.Helper()
	bin := binary(tb)
	shared.mu.Lock()
	p := shared.byCfg[extraTOML]
	if p == nil {
		p = &serverProc{}
		shared.byCfg[extraTOML] = p
		p.srv, p.err = shared.start(p, bin, extraTOML, len(shared.byCfg))
	}
	shared.mu.Unlock()
	if p.err != nil {
		tb.Fatalf("start hybox serve: %v", p.err)
	}
	return p.srv
}

func (s *servers) start(p *serverProc, bin, extraTOML string, n int) (*testServer, error) {
	dir := filepath.Join(s.dir, fmt.Sprintf("server%d", n))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// The compiled guests are kept between runs, so that a server starts
	// in well under a second.
	cache := filepath.Join(repoRoot(), "build", "sdk-test-wazero-cache")
	if err := os.MkdirAll(cache, 0o755); err == nil {
		_ = os.Symlink(cache, filepath.Join(dir, "wazero-cache"))
	}
	key := make([]byte, 16)
	vk := make([]byte, 32)
	_, _ = rand.Read(key)
	_, _ = rand.Read(vk)
	apiKey := "sdk-test-" + hex.EncodeToString(key)
	cfg := filepath.Join(dir, "hybox.toml")
	if err := os.WriteFile(cfg, []byte(extraTOML), 0o600); err != nil {
		return nil, err
	}
	guests := os.Getenv("HYBOX_GUEST_DIR")
	if guests == "" {
		guests = filepath.Join(repoRoot(), "build", "guests")
	}
	cmd := exec.Command(bin, "serve", "--config", cfg, "--addr", "127.0.0.1:0", "--data-dir", dir,
		"--api-key", apiKey, "--guest-dir", guests)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "HYBOX_VAULT_KEY=" + hex.EncodeToString(vk)}
	if strings.Contains(extraTOML, "# no vault") {
		cmd.Env = cmd.Env[:2]
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p.cmd, p.done = cmd, make(chan struct{})
	addr := make(chan string, 1)
	var logTail []string
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			if len(logTail) < 50 {
				logTail = append(logTail, line)
			}
			if strings.Contains(line, `msg="hybox listening"`) {
				for _, f := range strings.Fields(line) {
					if a, ok := strings.CutPrefix(f, "addr="); ok {
						addr <- a
					}
				}
			}
		}
		_ = cmd.Wait()
	}()
	select {
	case a := <-addr:
		srv := &testServer{URL: "http://" + a, APIKey: apiKey}
		return srv, nil
	case <-p.done:
		return nil, fmt.Errorf("hybox serve exited: %s", strings.Join(logTail, "\n"))
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("hybox serve did not listen within 2 minutes")
	}
}

func (s *servers) stopAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.byCfg {
		if p.cmd == nil || p.cmd.Process == nil {
			continue
		}
		_ = p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

// newClient returns a client of srv.
func newClient(tb testing.TB, srv *testServer, opts ...hybox.Option) *hybox.Client {
	tb.Helper()
	c, err := hybox.New(append([]hybox.Option{hybox.WithDomain(srv.URL), hybox.WithAPIKey(srv.APIKey)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// ctxFor returns a context bounded by the test's deadline (at most d).
func ctxFor(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

// newSandbox creates a wasm sandbox that the test kills at its end.
func newSandbox(tb testing.TB, c *hybox.Client, req api.CreateSandboxRequest) *hybox.Sandbox {
	tb.Helper()
	ctx := ctxFor(tb, time.Minute)
	sb, err := c.Create(ctx, req)
	if err != nil {
		tb.Fatalf("create: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = sb.Kill(ctx)
	})
	return sb
}
