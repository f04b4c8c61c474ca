package hybox_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	hybox "github.com/hybox-dev/hybox/sdks/go"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

// Container sandboxes are optional for the SDK's tests: they run when
// HYBOX_SDK_CONTAINERD names the socket of a running containerd (make
// test-sdk sets it as root, to the test containerd of
// scripts/containers/containerd.sh) and the test image archive exists.

const (
	testImage     = "localhost/hybox/python:3-bookworm"
	testNamespace = "hybox-test-sdk"
)

// containerServer returns a server with the runc runtime, or skips.
func containerServer(t testing.TB) *testServer {
	t.Helper()
	sock := os.Getenv("HYBOX_SDK_CONTAINERD")
	if sock == "" {
		t.Skip("container sandboxes: HYBOX_SDK_CONTAINERD (a containerd socket) is not set")
	}
	archive := os.Getenv("HYBOX_SDK_IMAGE_ARCHIVE")
	if archive == "" {
		archive = "/var/cache/hybox/python-3-bookworm.oci.tar"
	}
	ctr := func(args ...string) ([]byte, error) {
		return exec.Command("ctr", append([]string{"--address", sock, "-n", testNamespace}, args...)...).CombinedOutput()
	}
	if out, err := ctr("images", "ls", "-q"); err != nil || !strings.Contains(string(out), testImage) {
		if _, err := os.Stat(archive); err != nil {
			t.Skipf("container sandboxes: no test image archive at %s (make image)", archive)
		}
		if out, err := ctr("images", "import", archive); err != nil {
			t.Fatalf("import %s: %v\n%s", archive, err, out)
		}
	}
	execd := filepath.Join(filepath.Dir(binary(t)), "hybox-execd")
	return serverWith(t, "[oci]\naddress = \""+sock+"\"\nnamespace = \""+testNamespace+"\"\nexecd_binary = \""+execd+"\"\n")
}

func TestContainerSandbox(t *testing.T) {
	srv := containerServer(t)
	c := newClient(t, srv)
	ctx := ctxFor(t, 3*time.Minute)
	sb := newSandbox(t, c, api.CreateSandboxRequest{Image: api.ImageSpec{URI: testImage},
		Extensions: api.Extensions{hybox.RuntimeExtension: "runc"}})
	if _, err := sb.WaitRunning(ctx, 0); err != nil {
		t.Fatal(err)
	}

	t.Run("pty", func(t *testing.T) {
		p, err := sb.OpenPTY(ctx, api.PtyRequest{Command: "read a; echo got:$a; stty size; exit 7", Cols: 80, Rows: 24})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		defer p.Close()
		if err := p.Resize(ctx, 120, 40); err != nil {
			t.Fatalf("resize: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // the resize is a control frame; let it land before the input
		if _, err := p.Write([]byte("hello\n")); err != nil {
			t.Fatalf("write: %v", err)
		}
		var out bytes.Buffer
		done := make(chan error, 1)
		go func() { _, err := io.Copy(&out, p); done <- err }()
		code, err := p.Wait(ctx)
		if err != nil || code != 7 {
			t.Fatalf("wait: %d %v", code, err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("read: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the output did not end after the exit")
		}
		if s := out.String(); !strings.Contains(s, "got:hello") || !strings.Contains(s, "40 120") {
			t.Fatalf("terminal output %q", s)
		}
	})

	t.Run("web server through the endpoint", func(t *testing.T) {
		bin := t.TempDir()
		if out, err := exec.Command("go", "build", "-o", bin, "./examples/webserver").CombinedOutput(); err != nil {
			t.Fatalf("build: %v\n%s", err, out)
		}
		cmd := exec.Command(filepath.Join(bin, "webserver"))
		cmd.Env = append(os.Environ(), "HYBOX_DOMAIN="+srv.URL, "HYBOX_API_KEY="+srv.APIKey)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "<h1>hello from a sandbox</h1>") {
			t.Fatalf("webserver: %v\n%s", err, out)
		}
	})

	t.Run("images", func(t *testing.T) {
		imgs, err := c.Images(ctx)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, img := range imgs {
			found = found || img.Name == testImage
		}
		if !found {
			t.Errorf("images %+v lack %s", imgs, testImage)
		}
		if err := c.RemoveImage(ctx, "localhost/no/such:image"); !errors.Is(err, hybox.ErrNotFound) {
			t.Errorf("remove an unknown image: %v, want ErrNotFound", err)
		}
		if _, err := c.ImportImage(ctx, strings.NewReader("not a tar archive")); !errors.Is(err, hybox.ErrInvalid) {
			t.Errorf("import garbage: %v, want ErrInvalid", err)
		}
	})
}
