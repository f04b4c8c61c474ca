package hybox_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	hybox "github.com/hybox-dev/hybox/sdks/go"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

// Container sandboxes are optional for the SDK's tests: they run when
// HYBOX_SDK_CONTAINERD names the socket of a running containerd (make
// test-sdk sets it as root, through scripts/sdk-containers.sh, to the test
// containerd of scripts/containers/containerd.sh) and the test image
// archives exist.

const (
	testImage     = "localhost/hybox/python:3-bookworm"
	plotImage     = "localhost/hybox/python-plot:3-bookworm" // with Debian's matplotlib and numpy
	testNamespace = "hybox-test-sdk"
)

// importImage imports archive (or its default) into testNamespace unless
// the namespace has image; it skips when the archive is missing.
func importImage(t testing.TB, sock, image, archive, def string) {
	t.Helper()
	if archive == "" {
		archive = def
	}
	ctr := func(args ...string) ([]byte, error) {
		return exec.Command("ctr", append([]string{"--address", sock, "-n", testNamespace}, args...)...).CombinedOutput()
	}
	if out, err := ctr("images", "ls", "-q"); err == nil && strings.Contains(string(out), image) {
		return
	}
	if _, err := os.Stat(archive); err != nil {
		t.Skipf("container sandboxes: no archive of %s at %s (scripts/sdk-containers.sh builds it)", image, archive)
	}
	if out, err := ctr("images", "import", archive); err != nil {
		t.Fatalf("import %s: %v\n%s", archive, err, out)
	}
}

// containerServer returns a server with the runc runtime, or skips.
func containerServer(t testing.TB, poolOf ...any) *testServer {
	t.Helper()
	sock := os.Getenv("HYBOX_SDK_CONTAINERD")
	if sock == "" {
		t.Skip("container sandboxes: HYBOX_SDK_CONTAINERD (a containerd socket) is not set")
	}
	importImage(t, sock, testImage, os.Getenv("HYBOX_SDK_IMAGE_ARCHIVE"), "/var/cache/hybox/python-3-bookworm.oci.tar")
	execd := filepath.Join(filepath.Dir(binary(t)), "hybox-execd")
	cfg := "[oci]\naddress = \"" + sock + "\"\nnamespace = \"" + testNamespace + "\"\nexecd_binary = \"" + execd + "\"\n"
	runtime, size := "runc", 0
	if len(poolOf) == 2 {
		runtime, size = poolOf[0].(string), poolOf[1].(int)
	}
	if runtime == "runsc" {
		runsc := os.Getenv("HYBOX_SDK_RUNSC")
		if runsc == "" {
			t.Skip("gVisor sandboxes: HYBOX_SDK_RUNSC (gVisor's runsc) is not set")
		}
		cfg += "runsc_binary = \"" + runsc + "\"\n"
	}
	if size > 0 {
		cfg += fmt.Sprintf("\n[[pools]]\nname = \"sdk-%s\"\nimage = \"%s\"\nruntime = \"%s\"\nsize = %d\n", runtime, testImage, runtime, size)
	}
	return serverWith(t, cfg)
}

// waitPoolIdle waits until every pool of srv is full again (no pools: at
// once), so that each measured create finds a member.
func waitPoolIdle(tb testing.TB, c *hybox.Client, srv *testServer) {
	tb.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		pools, err := c.ListPools(context.Background())
		if err != nil {
			tb.Fatal(err)
		}
		full := true
		for _, p := range pools {
			if p.Status.Available < p.CapacitySpec.BufferMin || p.Status.Starting > 0 {
				full = false
			}
		}
		if full {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("pools never refilled: %+v", pools)
		}
		time.Sleep(20 * time.Millisecond)
	}
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

// Pools through the SDK: the configured pool is listed, a create claims
// from it, and the typed errors come back from a real server.
func TestContainerPool(t *testing.T) {
	srv := containerServer(t, "runc", 1)
	c := newClient(t, srv)
	ctx := ctxFor(t, 3*time.Minute)
	waitPoolIdle(t, c, srv)
	pools, err := c.ListPools(ctx)
	if err != nil || len(pools) != 1 || pools[0].Name != "sdk-runc" || pools[0].Source != api.PoolSourceConfig {
		t.Fatalf("pools %+v, %v", pools, err)
	}
	sb := newSandbox(t, c, api.CreateSandboxRequest{Image: api.ImageSpec{URI: testImage}, Entrypoint: []string{"sleep", "infinity"},
		Env: map[string]string{"FROM": "pool"}, Extensions: api.Extensions{hybox.RuntimeExtension: "runc"}})
	x, err := sb.Exec(ctx, hybox.Command{Command: "echo $FROM"}, nil)
	if err != nil || x.Text() != "pool" {
		t.Fatalf("exec: %v %+v", err, x)
	}
	p, err := c.GetPool(ctx, "sdk-runc")
	if err != nil || p.Status.Allocated != 1 {
		t.Fatalf("pool after the claim: %+v, %v", p, err)
	}
	if _, err := c.GetPool(ctx, "none"); !errors.Is(err, hybox.ErrNotFound) {
		t.Fatalf("unknown pool: %v", err)
	}
	if _, err := c.CreatePool(ctx, api.CreatePoolRequest{Name: "x", Template: api.PoolTemplate{Image: api.ImageSpec{URI: "localhost/none:1"}},
		CapacitySpec: api.PoolCapacitySpec{BufferMax: 1, BufferMin: 1, PoolMax: 1}}); !errors.Is(err, hybox.ErrInvalid) {
		t.Fatalf("pool of a missing image: %v", err)
	}
	if err := c.DeletePool(ctx, "sdk-runc"); !errors.Is(err, hybox.ErrInvalid) {
		t.Fatalf("deleting a configured pool: %v", err)
	}
}

// TestContainerPlotContext: in a container Python code context of the
// plotting image, a matplotlib figure is an image/png result and display()
// of an object with _repr_*_ methods streams its MIME bundle, as in wasm.
func TestContainerPlotContext(t *testing.T) {
	srv := containerServer(t)
	importImage(t, os.Getenv("HYBOX_SDK_CONTAINERD"), plotImage, os.Getenv("HYBOX_SDK_PLOT_IMAGE_ARCHIVE"), "/var/cache/hybox/python-plot-3-bookworm.oci.tar")
	c := newClient(t, srv)
	ctx := ctxFor(t, 3*time.Minute)
	sb := newSandbox(t, c, api.CreateSandboxRequest{Image: api.ImageSpec{URI: plotImage},
		Extensions: api.Extensions{hybox.RuntimeExtension: "runc"}})
	cc, err := sb.CreateContext(ctx, api.CodeContextRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	run := func(src string) *hybox.Execution {
		t.Helper()
		x, err := sb.RunCode(ctx, code(cc.ID, src), nil)
		if err != nil || x.Err() != nil {
			t.Fatalf("run %q: %v %v", src, err, x.Err())
		}
		return x
	}
	run("import numpy as np\nxs = np.linspace(0, 1, 5)")
	fig := run("import matplotlib.pyplot as plt\nplt.plot(xs, xs ** 2)\nplt.show()\nprint('after')")
	if len(fig.Results) != 1 || fig.Results[0]["image/png"] == "" || strings.Join(fig.Stdout, "") != "after\n" {
		t.Fatalf("figure: results %d %v, stdout %q", len(fig.Results), keys(fig.Results), fig.Stdout)
	}
	png, err := base64.StdEncoding.DecodeString(fig.Results[0]["image/png"])
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("image/png is not a PNG: %v %q", err, png[:min(len(png), 16)])
	}
	rich := run("class Card:\n    def _repr_html_(self): return '<b>card</b>'\n" +
		"    def _repr_latex_(self): return r'$n$'\n    def __repr__(self): return 'Card()'\n" +
		"display(Card())\nlen(xs)")
	want := []api.MimeBundle{{"text": "Card()", "text/html": "<b>card</b>", "text/latex": "$n$"}, {"text": "5"}}
	if fmt.Sprint(rich.Results) != fmt.Sprint(want) {
		t.Fatalf("display results %v, want %v", rich.Results, want)
	}
}

func keys(bs []api.MimeBundle) [][]string {
	var out [][]string
	for _, b := range bs {
		var ks []string
		for k := range b {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		out = append(out, ks)
	}
	return out
}

// codeImage is the code-interpreter test image: the plain image plus
// Debian's JDK 17 (openjdk-17-jdk-headless) and Go (golang-go).
const codeImage = "localhost/hybox/code-interpreter:bookworm"

// TestContainerJavaGoContexts: Java (JShell) and Go contexts of a runc (and
// a runsc) sandbox of the code-interpreter image keep their state between cells,
// report compile errors at the cell's lines and runtime failures as the
// execution's error, and stop an endless loop at its timeout; the plain
// image has neither language.
func TestContainerJavaGoContexts(t *testing.T) {
	for _, runtime := range []string{"runc", "runsc"} {
		t.Run(runtime, func(t *testing.T) { testJavaGoContexts(t, runtime) })
	}
}

func testJavaGoContexts(t *testing.T, runtime string) {
	srv := containerServer(t, runtime, 0)
	importImage(t, os.Getenv("HYBOX_SDK_CONTAINERD"), codeImage, os.Getenv("HYBOX_SDK_CODE_IMAGE_ARCHIVE"), "/var/cache/hybox/code-interpreter-bookworm.oci.tar")
	c := newClient(t, srv)
	ctx := ctxFor(t, 5*time.Minute)
	plain := newSandbox(t, c, api.CreateSandboxRequest{Image: api.ImageSpec{URI: testImage},
		Extensions: api.Extensions{hybox.RuntimeExtension: runtime}})
	sb := newSandbox(t, c, api.CreateSandboxRequest{Image: api.ImageSpec{URI: codeImage},
		Extensions: api.Extensions{hybox.RuntimeExtension: runtime}})
	for _, lang := range []string{"java", "go", "golang"} {
		_, err := plain.CreateContext(ctx, api.CodeContextRequest{Language: lang})
		var ae *hybox.APIError
		if !errors.As(err, &ae) || ae.Code != "UNKNOWN_LANGUAGE" || !strings.Contains(ae.Message, "python") {
			t.Fatalf("%s in the plain image: %v", lang, err)
		}
	}

	type step struct {
		src, stdout, result, ename, evalue string
	}
	check := func(t *testing.T, id string, steps []step) {
		t.Helper()
		for _, st := range steps {
			start := time.Now()
			x, err := sb.RunCode(ctx, code(id, st.src), nil)
			t.Logf("%s: %q took %s", t.Name(), st.src, time.Since(start).Round(time.Millisecond))
			if err != nil {
				t.Fatalf("run %q: %v", st.src, err)
			}
			result, ename, evalue := "", "", ""
			if len(x.Results) > 0 {
				result = x.Results[len(x.Results)-1]["text"]
			}
			if x.Error != nil {
				ename, evalue = x.Error.EName, x.Error.EValue
			}
			if strings.Join(x.Stdout, "") != st.stdout || result != st.result || ename != st.ename || !strings.Contains(evalue, st.evalue) {
				t.Fatalf("run %q: stdout %q result %q error %+v", st.src, x.Stdout, result, x.Error)
			}
		}
	}
	timeout := func(t *testing.T, id, loop, after string, want step) {
		t.Helper()
		req := code(id, loop)
		req.TimeoutMs = 2000
		start := time.Now()
		x, err := sb.RunCode(ctx, req, nil)
		if err != nil || x.Error == nil || x.Error.EName != "TimeoutError" {
			t.Fatalf("endless loop: %v %+v", err, x)
		}
		if d := time.Since(start); d > 8*time.Second {
			t.Fatalf("the loop ended after %s", d)
		}
		want.src = after
		check(t, id, []step{want})
	}

	t.Run("java", func(t *testing.T) {
		start := time.Now()
		cc, err := sb.CreateContext(ctx, api.CodeContextRequest{Language: "java"})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("java context started in %s", time.Since(start).Round(time.Millisecond))
		check(t, cc.ID, []step{
			{src: "int x = 41;"},
			{src: "x + 1", result: "42"},
			{src: "String greet(String n) { return \"hi \" + n; }"},
			{src: "System.out.println(greet(\"java\"));\ngreet(\"x\").length()", stdout: "hi java\n", result: "4"},
			{src: "int y = 2;\n\nint z = missing + y;", ename: "CompilationError", evalue: "<cell-5>:3"},
			{src: "Integer.parseInt(\"nope\")", ename: "java.lang.NumberFormatException", evalue: "nope"},
			{src: "x", result: "41"},
		})
		timeout(t, cc.ID, "while (true) {}", "x * 2", step{result: "82"})
		list, err := sb.Contexts(ctx, "java")
		if err != nil || len(list) != 1 || list[0].ID != cc.ID {
			t.Fatalf("java contexts: %+v %v", list, err)
		}
	})

	t.Run("go", func(t *testing.T) {
		start := time.Now()
		cc, err := sb.CreateContext(ctx, api.CodeContextRequest{Language: "golang"})
		if err != nil || cc.Language != "go" {
			t.Fatalf("go context: %+v %v", cc, err)
		}
		t.Logf("go context started in %s", time.Since(start).Round(time.Millisecond))
		check(t, cc.ID, []step{
			{src: "import \"fmt\"\n\nfunc double(n int) int { return 2 * n }\nfmt.Println(double(21))", stdout: "42\n"},
			{src: "fmt.Println(double(4))", stdout: "8\n"},
			{src: "import \"strings\"\nfmt.Println(strings.Repeat(\"ab\", 2))", stdout: "abab\n"},
			{src: "n := 1\n\nfmt.Println(n, undefinedName)", ename: "CompilationError", evalue: "<cell-4>:3:"},
			{src: "var m map[string]int\nm[\"a\"] = 1", ename: "panic", evalue: "assignment to entry in nil map"},
			{src: "fmt.Println(strings.ToUpper(\"still\"))", stdout: "STILL\n"},
		})
		timeout(t, cc.ID, "for {\n}", "fmt.Println(double(1))", step{stdout: "2\n"})
	})
}
