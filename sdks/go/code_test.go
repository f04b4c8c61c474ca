package hybox_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	hybox "github.com/hybox-dev/hybox/sdks/go"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

func code(contextID, src string) hybox.Code { return hybox.CodeIn(contextID, src) }

func TestCodeContexts(t *testing.T) {
	c := newClient(t, server(t))
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	ctx := ctxFor(t, 2*time.Minute)
	cc, err := sb.CreateContext(ctx, api.CodeContextRequest{Language: "python"})
	if err != nil || cc.ID == "" || cc.Language != "python" {
		t.Fatalf("create context: %v %+v", err, cc)
	}
	var results []api.MimeBundle
	var outs []string
	var failures []api.ExecError
	h := &hybox.Handlers{
		OnStdout: func(s string) { outs = append(outs, s) },
		OnResult: func(r api.MimeBundle) { results = append(results, r) },
		OnError:  func(e api.ExecError) { failures = append(failures, e) },
	}
	steps := []struct {
		name, src, stdout, result, ename string
	}{
		{name: "state", src: "x = 41\nprint('set')", stdout: "set"},
		{name: "result", src: "x + 1", result: "42"},
		{name: "exception", src: "1/0", ename: "ZeroDivisionError"},
		{name: "state kept after an exception", src: "x * 2", result: "82"},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			outs, results, failures = nil, nil, nil
			x, err := sb.RunCode(ctx, code(cc.ID, st.src), h)
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			if got := strings.TrimSpace(strings.Join(outs, "")); got != st.stdout {
				t.Errorf("stdout %q, want %q", got, st.stdout)
			}
			if st.result != "" && (len(results) != 1 || results[0]["text"] != st.result || len(x.Results) != 1) {
				t.Errorf("results %+v, want %q", results, st.result)
			}
			if st.ename == "" {
				if x.Err() != nil || len(failures) != 0 {
					t.Errorf("Err() = %v, failures %v", x.Err(), failures)
				}
				return
			}
			var ee *hybox.ExecutionError
			if !errors.As(x.Err(), &ee) || ee.EName != st.ename || len(failures) != 1 || len(ee.Traceback) == 0 {
				t.Errorf("Err() = %v, failures %v, want %s", x.Err(), failures, st.ename)
			}
		})
	}

	js, err := sb.CreateContext(ctx, api.CodeContextRequest{Language: "javascript"})
	if err != nil {
		t.Fatal(err)
	}
	all, err := sb.Contexts(ctx, "")
	if err != nil || !hasContext(all, cc.ID) || !hasContext(all, js.ID) {
		t.Fatalf("contexts: %v %+v", err, all)
	}
	pys, err := sb.Contexts(ctx, "python")
	if err != nil || !hasContext(pys, cc.ID) || hasContext(pys, js.ID) {
		t.Fatalf("python contexts: %v %+v", err, pys)
	}
	if err := sb.DeleteContext(ctx, cc.ID); err != nil {
		t.Fatalf("delete context: %v", err)
	}
	if _, err := sb.RunCode(ctx, code(cc.ID, "x"), nil); !errors.Is(err, hybox.ErrNotFound) {
		t.Errorf("run in a deleted context: %v, want ErrNotFound", err)
	}
	if err := sb.DeleteContexts(ctx, "javascript"); err != nil {
		t.Fatalf("delete javascript contexts: %v", err)
	}
	if left, _ := sb.Contexts(ctx, "javascript"); hasContext(left, js.ID) {
		t.Errorf("javascript context %s still listed", js.ID)
	}

	// The default context of a language, by language alone.
	x, err := sb.RunCode(ctx, hybox.CodeOf("javascript", "console.log(6 * 7)"), nil)
	if err != nil || strings.TrimSpace(x.Text()) != "42" {
		t.Fatalf("default javascript context: %v %+v", err, x)
	}

	// TypeScript and Bash contexts keep state; a TypeScript error names its line.
	ts, err := sb.CreateContext(ctx, api.CodeContextRequest{Language: "typescript"})
	if err != nil {
		t.Fatal(err)
	}
	if x, err := sb.RunCode(ctx, code(ts.ID, "interface P { n: number }\nconst p: P = { n: 20 }"), nil); err != nil || x.Err() != nil {
		t.Fatalf("typescript: %v %v", err, x.Err())
	}
	if x, err := sb.RunCode(ctx, code(ts.ID, "p.n + 22"), nil); err != nil || len(x.Results) != 1 || x.Results[0]["text"] != "42" {
		t.Fatalf("typescript state: %v %+v", err, x)
	}
	x, err = sb.RunCode(ctx, code(ts.ID, "type T = string\n\nthrow new RangeError('far')"), nil)
	if err != nil || x.Error == nil || x.Error.EName != "RangeError" || !strings.Contains(strings.Join(x.Error.Traceback, "\n"), ":3") {
		t.Fatalf("typescript error: %v %+v", err, x.Error)
	}
	sh, err := sb.CreateContext(ctx, api.CodeContextRequest{Language: "bash"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.RunCode(ctx, code(sh.ID, "N=41; cd /tmp"), nil); err != nil {
		t.Fatal(err)
	}
	if x, err := sb.RunCode(ctx, code(sh.ID, "echo $((N + 1)) $PWD"), nil); err != nil || strings.Join(x.Stdout, "") != "42 /tmp\n" {
		t.Fatalf("bash state: %v %q", err, x.Stdout)
	}
}

func hasContext(list []api.CodeContext, id string) bool {
	for _, c := range list {
		if c.ID == id {
			return true
		}
	}
	return false
}

func TestCodeInterruptAndEvents(t *testing.T) {
	c := newClient(t, server(t))
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	ctx := ctxFor(t, 2*time.Minute)
	cc, err := sb.CreateContext(ctx, api.CodeContextRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		x   *hybox.Execution
		err error
	}
	done := make(chan outcome, 1)
	started := make(chan struct{})
	var once sync.Once
	go func() {
		x, err := sb.RunCode(ctx, code(cc.ID, "import time\nprint('go', flush=True)\nwhile True:\n    time.sleep(0.01)"),
			&hybox.Handlers{OnStdout: func(string) { once.Do(func() { close(started) }) }})
		done <- outcome{x, err}
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the loop did not start")
	}
	// While it runs, the context is busy.
	if _, err := sb.RunCode(ctx, code(cc.ID, "1"), nil); !errors.Is(err, hybox.ErrConflict) {
		t.Errorf("run in a busy context: %v, want ErrConflict", err)
	}
	if err := sb.Interrupt(ctx, cc.ID); err != nil {
		t.Fatalf("interrupt: %v", err)
	}
	select {
	case o := <-done:
		if o.err != nil || o.x.Error == nil || o.x.Complete {
			t.Fatalf("interrupted run: %v %+v", o.err, o.x)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("interrupt did not end the loop")
	}

	// Events as an iterator; leaving early interrupts, so the context is
	// free again.
	var types []api.EventType
	for ev, err := range sb.CodeEvents(ctx, code(cc.ID, "print('a', flush=True)\nimport time\ntime.sleep(60)")) {
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, ev.Type)
		if ev.Type == api.EventTypeStdout {
			break
		}
	}
	if types[0] != api.EventTypeInit {
		t.Errorf("event types %v", types)
	}
	var x *hybox.Execution
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		x, err = sb.RunCode(ctx, code(cc.ID, "'free'"), nil)
		if !errors.Is(err, hybox.ErrConflict) {
			break
		}
	}
	if err != nil || len(x.Results) != 1 || x.Results[0]["text"] != "'free'" {
		t.Fatalf("after leaving the iterator: %v %+v", err, x)
	}

	// A cancelled context interrupts too.
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if _, err := sb.RunCode(cctx, code(cc.ID, "import time\ntime.sleep(60)"), nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled run: %v", err)
	}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		x, err = sb.RunCode(ctx, code(cc.ID, "'again'"), nil)
		if !errors.Is(err, hybox.ErrConflict) {
			break
		}
	}
	if err != nil || x.Err() != nil {
		t.Fatalf("after a cancelled run: %v %+v", err, x)
	}
}

func TestRunOneShot(t *testing.T) {
	c := newClient(t, server(t))
	ctx := ctxFor(t, time.Minute)
	var outs []string
	x, err := c.Run(ctx, api.RunRequest{Language: "python", Code: ptr("print('hi')\n6*7")},
		&hybox.Handlers{OnStdout: func(s string) { outs = append(outs, s) }})
	if err != nil || x.Err() != nil {
		t.Fatalf("run: %v %v", err, x.Err())
	}
	if strings.TrimSpace(strings.Join(outs, "")) != "hi" || len(x.Results) != 1 || x.Results[0]["text"] != "42" {
		t.Fatalf("run: outs %q results %+v", outs, x.Results)
	}
	x, err = c.Run(ctx, api.RunRequest{Language: "python", Code: ptr("raise ValueError('no')")}, nil)
	var ee *hybox.ExecutionError
	if err != nil || !errors.As(x.Err(), &ee) || ee.EName != "ValueError" {
		t.Fatalf("run raising: %v %v", err, x.Err())
	}
	if _, err := c.Run(ctx, api.RunRequest{Language: "cobol", Code: ptr("x")}, nil); !errors.Is(err, hybox.ErrInvalid) {
		t.Errorf("run cobol: %v, want ErrInvalid", err)
	}
}
