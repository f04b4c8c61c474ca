package oci_test

import (
	"context"
	"strings"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/runtimes/oci"
	"github.com/hybox-dev/hybox/runtimes/oci/ocitest"
)

// TestForkBomb: a fork bomb is held by the pids limit; the sandbox answers
// afterwards (the bomb's leftovers are reclaimed when nothing else can
// start), a neighbour is unaffected, and Destroy removes it all.
func TestForkBomb(t *testing.T) {
	b := newBackend(t, func(o *oci.Options) { o.PidsLimit = 64 })
	rt := runtimeNamed(t, b, "runc")
	bombSpec := testSpec(t, "bomb")
	bomb := newExecClient(t, mustCreate(t, rt, bombSpec))
	other := newExecClient(t, mustCreate(t, rt, testSpec(t, "neighbour")))

	start := time.Now()
	o := bomb.run(`:(){ :|:& };:`)
	t.Logf("the bomb's command ended after %v: ename=%q evalue=%q", time.Since(start).Round(time.Millisecond), o.EName, o.EValue)
	time.Sleep(500 * time.Millisecond) // let it fill the pids limit
	if pc := bomb.run("cat /sys/fs/cgroup/pids/pids.current"); pc.Stdout != "" {
		t.Logf("pids.current right after reclaim: %s", pc.Stdout)
	}

	if o := other.run("echo fine"); o.Stdout != "fine" {
		t.Errorf("neighbour during the bomb: %+v", o)
	}
	if o := bomb.run("echo alive"); o.Stdout != "alive" || !o.Complete {
		t.Errorf("the bombed sandbox does not answer a later command: %+v", o)
	}
	if o := bomb.run("ps -e -o pid,pgid,stat,args | head -20"); o.Stdout == "" {
		t.Errorf("ps: %+v", o)
	} else {
		t.Logf("processes after reclaim: %s", o.Stdout)
	}
	ctx := context.Background()
	begin := time.Now()
	if err := rt.Destroy(ctx, bombSpec); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	t.Logf("destroy took %v", time.Since(begin).Round(time.Millisecond))
	if left := ocitest.Leftovers(ocitest.Namespace, ocitest.Runc(), bombSpec.ID); len(left) > 0 {
		t.Errorf("left after destroy: %v", left)
	}
}

// TestOOMKilled: a command that allocates past the sandbox's memory limit
// ends with 137 and says OOMKilled, in its stream and in its status; the
// sandbox keeps working.
func TestOOMKilled(t *testing.T) {
	b := newBackend(t)
	spec := testSpec(t, "oom")
	spec.MemoryBytes = 64 << 20
	c := newExecClient(t, mustCreate(t, runtimeNamed(t, b, "runc"), spec))
	for _, tc := range []struct{ name, command string }{
		{"python", `python3 -c "b = bytearray(512 << 20)"`},
		{"pipeline", `head -c 300M /dev/zero | tail`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := c.run(tc.command)
			if o.EName != "CommandExecError" || o.EValue != "137" || !strings.Contains(strings.Join(o.Traceback, "\n"), "OOMKilled") {
				t.Fatalf("outcome %+v, want evalue 137 and OOMKilled", o)
			}
			st := c.status(o.ID)
			if code, _ := st["exit_code"].(float64); code != 137 || !strings.Contains(st["error"].(string), "OOMKilled") {
				t.Fatalf("status %v, want exit_code 137 and error OOMKilled", st)
			}
		})
	}
	// Not every 137 is an OOM kill.
	if o := c.run("sleep 10 & kill -9 $!; wait $!"); o.EValue != "137" || len(o.Traceback) != 0 {
		t.Errorf("a plain SIGKILL: %+v, want 137 without an error text", o)
	}
	if o := c.run("echo still here"); o.Stdout != "still here" {
		t.Errorf("after the OOM kill: %+v", o)
	}
}

// TestExited: the sandbox reports its init's end, once, when it ends on
// its own, and nothing when it is destroyed.
func TestExited(t *testing.T) {
	b := newBackend(t)
	rt := runtimeNamed(t, b, "runc")
	spec := testSpec(t, "exited")
	sb := mustCreate(t, rt, spec)
	ex, ok := sb.(runtimes.Exiter)
	if !ok {
		t.Fatal("the oci sandbox does not implement runtimes.Exiter")
	}
	select {
	case st := <-ex.Exited():
		t.Fatalf("exit reported while running: %+v", st)
	case <-time.After(100 * time.Millisecond):
	}
	// Kill init from the host, behind the backend's back.
	ctx := namespaces.WithNamespace(context.Background(), ocitest.Namespace)
	c := ocitest.Client(t, ocitest.Socket(), ocitest.Namespace)
	cont, err := c.LoadContainer(ctx, spec.ID)
	if err != nil {
		t.Fatal(err)
	}
	task, err := cont.Task(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Kill(ctx, 9, containerd.WithKillAll); err != nil {
		t.Fatal(err)
	}
	select {
	case st := <-ex.Exited():
		if st.Code != 137 || st.Reason != "Killed" {
			t.Fatalf("exit %+v, want {137 Killed}", st)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit reported")
	}

	// Destroy of a live sandbox is not reported.
	spec2 := testSpec(t, "exited2")
	sb2, err := rt.Create(context.Background(), spec2)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Destroy(context.Background(), spec2); err != nil {
		t.Fatal(err)
	}
	// ... and releases whoever waits: the channel is closed, with no
	// status in it.
	select {
	case st, ok := <-sb2.(runtimes.Exiter).Exited():
		if ok {
			t.Fatalf("destroy reported as an exit: %+v", st)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Exited is not closed after Destroy: a waiter would leak")
	}
}
