package pyguest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
)

// TestStateSurvivesAnotherManager: a context saved by one Manager is
// restored by another with the same image directory (a server started
// again), with its variables, imported modules and working directory.
func TestStateSurvivesAnotherManager(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	m1 := newManager(t, Options{ImageDir: dir})
	root, _ := newRoot(t)
	if err := root.Mkdir("sub", 0o755); err != nil {
		t.Fatal(err)
	}
	it := newInterp(t, m1, root, "/", 0)
	run(t, it, "import string, os\nx = [i * i for i in range(100000)]\nos.chdir('/sub')\nstring.capwords = lambda *a: 'patched'")
	st, err := m1.SaveState(ctx, it)
	if err != nil || st == nil {
		t.Fatalf("SaveState: %v %v", st, err)
	}
	if st.DirtyBytes() == 0 || st.DirtyBytes() > st.Size/2 {
		t.Fatalf("diff of %d bytes out of %d", st.DirtyBytes(), st.Size)
	}
	path := dir + "/ctx.state"
	if err := engine.WriteStateFile(path, st); err != nil {
		t.Fatal(err)
	}
	_ = m1.Close()

	m2 := newManager(t, Options{ImageDir: dir})
	st2, err := engine.ReadStateFile(path)
	if err != nil {
		t.Fatal(err)
	}
	it2, err := m2.RestoreInterpreter(ctx, root, 0, nil, st2, false)
	if err != nil {
		t.Fatal(err)
	}
	defer it2.Close()
	rec, xerr := run(t, it2, "(sum(x), os.getcwd(), string.capwords('a b'), __import__('sys').modules['string'] is string)")
	if xerr != nil {
		t.Fatalf("exec error %+v", xerr)
	}
	if got := plain(t, rec); got != "(333328333350000, '/sub', 'patched', True)" {
		t.Fatalf("restored context: %s", got)
	}
	// A manager with another image refuses the diff.
	m3 := newManager(t, Options{ImageDir: t.TempDir()})
	if _, err := m3.RestoreInterpreter(ctx, root, 0, nil, st2, false); !errors.Is(err, engine.ErrState) || !strings.Contains(err.Error(), "another memory image") {
		t.Fatalf("other image: %v", err)
	}
}

// TestRestoredMemoryLimit: a restored context keeps its sandbox's memory
// cap, and a state larger than the cap is refused.
func TestRestoredMemoryLimit(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, Options{})
	root, _ := newRoot(t)
	it := newInterp(t, m, root, "/", 0)
	run(t, it, "big = bytearray(120 << 20)")
	st, err := m.SaveState(ctx, it)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.RestoreInterpreter(ctx, root, 64<<20, nil, st, false); !errors.Is(err, engine.ErrState) || !strings.Contains(err.Error(), "more than the limit") {
		t.Fatalf("restore above the limit: %v", err)
	}
	it2, err := m.RestoreInterpreter(ctx, root, 200<<20, nil, st, false)
	if err != nil {
		t.Fatal(err)
	}
	defer it2.Close()
	rec, xerr := run(t, it2, "try:\n    more = bytearray(150 << 20)\nexcept MemoryError:\n    print('MemoryError')\nlen(big)")
	if xerr != nil {
		t.Fatalf("%+v", xerr)
	}
	if out, _, _ := rec.out(); !strings.Contains(out, "MemoryError") || plain(t, rec) != "125829120" {
		t.Fatalf("out %q result %q", out, plain(t, rec))
	}
}

// TestMappedStateRoundTrips: a context restored from a mapped state file
// (its pages mapped copy-on-write) saves everything again, the pages it
// did not touch since included, and the next restore has all of it.
func TestMappedStateRoundTrips(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	m := newManager(t, Options{ImageDir: dir})
	root, _ := newRoot(t)
	it := newInterp(t, m, root, "/", 0)
	run(t, it, "data = bytearray(b'a' * (8 << 20))\nkeep = list(range(1000))")
	save := func(it execd.Interpreter, name string) string {
		st, err := m.SaveState(ctx, it)
		if err != nil {
			t.Fatal(err)
		}
		p := dir + "/" + name
		if err := engine.WriteStateFile(p, st); err != nil {
			t.Fatal(err)
		}
		return p
	}
	restore := func(p string) execd.Interpreter {
		st, err := engine.MapStateFile(p)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		it, err := m.RestoreInterpreter(ctx, root, 0, nil, st, false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = it.Close() })
		return it
	}
	it2 := restore(save(it, "one"))
	run(t, it2, "data[0:1] = b'b'")
	it3 := restore(save(it2, "two"))
	rec, xerr := run(t, it3, "(bytes(data[:2]), data.count(b'a'), sum(keep))")
	if xerr != nil || plain(t, rec) != "(b'ba', 8388607, 499500)" {
		t.Fatalf("%+v %q", xerr, plain(t, rec))
	}
}

// TestRestoredOpenFiles: a file a context had open is closed after a
// restore (its descriptor is not open in the new instance): using it fails
// plainly, and a file opened after the restore is not reached through it.
func TestRestoredOpenFiles(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, Options{})
	root, _ := newRoot(t)
	it := newInterp(t, m, root, "/", 0)
	run(t, it, "f = open('/a', 'w')\nf.write('a')\nf.flush()")
	st, err := m.SaveState(ctx, it)
	if err != nil {
		t.Fatal(err)
	}
	it2, err := m.RestoreInterpreter(ctx, root, 0, nil, st, false)
	if err != nil {
		t.Fatal(err)
	}
	defer it2.Close()
	rec, xerr := run(t, it2, "g = open('/b', 'w')\ntry:\n    f.write('x')\n    r = 'wrote'\nexcept ValueError as e:\n    r = str(e)\ng.close()\n(r, open('/b').read(), open('/a').read())")
	if xerr != nil || plain(t, rec) != "('I/O operation on closed file.', '', 'a')" {
		t.Fatalf("%+v %q", xerr, plain(t, rec))
	}
}
