package pyguest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/execd"
)

// readyManager returns a Manager whose n ready clones are all made.
func readyManager(t *testing.T, n int) *Manager {
	t.Helper()
	m := newManager(t, Options{ReadyClones: n})
	require.NoError(t, m.waitFull(context.Background()))
	m.mu.Lock()
	defer m.mu.Unlock()
	require.Len(t, m.ready, n)
	return m
}

// Contexts taken from the ready clones are bound to their own sandbox
// only, have their own random state, start with no trace of the warm-up
// (no `_`, the first cell is <cell-1>) and keep their memory limit.
func TestReadyClones(t *testing.T) {
	m := readyManager(t, 3)
	ctx := context.Background()
	rootA, dirA := newRoot(t)
	rootB, dirB := newRoot(t)
	require.NoError(t, os.WriteFile(filepath.Join(dirA, "a.txt"), []byte("A"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dirB, "b.txt"), []byte("B"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(dirA, "work"), 0o755))

	a, err := m.NewInterpreter(ctx, rootA, "/work", 0, nil)
	require.NoError(t, err)
	defer a.Close()
	b, err := m.NewInterpreter(ctx, rootB, "/", 0, nil)
	require.NoError(t, err)
	defer b.Close()
	m.mu.Lock()
	left := len(m.ready)
	m.mu.Unlock()
	assert.Equal(t, 1, left, "both contexts came from the ready clones")

	get := func(code string, it execd.Interpreter) (string, string) {
		t.Helper()
		rec := newRecorder()
		ee, err := it.Run(ctx, code, rec)
		require.NoError(t, err)
		if ee != nil {
			return "", ee.EName + ": " + ee.EValue + "\n" + strings.Join(ee.Traceback, "\n")
		}
		return plain(t, rec), ""
	}
	_, e := get("_", a)
	assert.Contains(t, e, "NameError", "no `_` from the warm-up")
	v, _ := get("import os\n(os.getcwd(), os.environ['HOME'], sorted(os.listdir('/')))", a)
	assert.Equal(t, "('/work', '/work', ['a.txt', 'work'])", v, "a sees its own sandbox, in its cwd")
	v, _ = get("import os\nsorted(os.listdir('/'))", b)
	assert.Equal(t, "['b.txt']", v, "b sees only its own")
	_, e = get("1/0", b)
	assert.Contains(t, e, "<cell-2>", "b's second cell is <cell-2>: the warm-up left no count")
	ra, _ := get("import random\nrandom.random()", a)
	rb, _ := get("import random\nrandom.random()", b)
	assert.NotEqual(t, ra, rb, "each clone has its own random state")

	// A limit below what a ready clone already uses is not given one: the
	// context is cloned for it and fails as it would have.
	_, err = m.NewInterpreter(ctx, rootA, "/", 1<<20, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "memory limit")
}

// Ready clones are warmed in Options.ReadyCwd before any workspace is
// bound: a context that starts there runs its first cell with no init
// request, in its own workspace (its files listed, its modules imported
// from its working directory, HOME set); one that starts elsewhere
// changes there in its first cell.
func TestReadyClonesInReadyCwd(t *testing.T) {
	m := newManager(t, Options{ReadyClones: 3, ReadyCwd: "/workspace"})
	require.NoError(t, m.waitFull(context.Background()))
	ctx := context.Background()
	get := func(it execd.Interpreter, code string) string {
		t.Helper()
		rec := newRecorder()
		ee, err := it.Run(ctx, code, rec)
		require.NoError(t, err)
		require.Nil(t, ee, "%+v", ee)
		return plain(t, rec)
	}
	for _, name := range []string{"one", "two"} {
		root, dir := newRoot(t)
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "workspace"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "workspace", "mymod.py"), []byte("X = "+`"`+name+`"`+"\n"), 0o644))
		before := readyCount(m)
		it, err := m.NewInterpreter(ctx, root, "/workspace", 0, nil)
		require.NoError(t, err)
		defer it.Close()
		require.Equal(t, before-1, readyCount(m), "context %s is a ready clone", name)
		assert.Equal(t, "('/workspace', '/workspace', '"+name+"', ['mymod.py'])",
			get(it, "import os, mymod\n(os.getcwd(), os.environ['HOME'], mymod.X, sorted(os.listdir('.')))"),
			"context %s: its own workspace, a module of its working directory", name)
	}
	root, dir := newRoot(t)
	require.NoError(t, os.Mkdir(filepath.Join(dir, "elsewhere"), 0o755))
	it, err := m.NewInterpreter(ctx, root, "/elsewhere", 0, nil)
	require.NoError(t, err)
	defer it.Close()
	assert.Equal(t, "('/elsewhere', '/elsewhere')", get(it, "import os\n(os.getcwd(), os.environ['HOME'])"))
}

// readyCount is how many ready clones m holds.
func readyCount(m *Manager) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.ready)
}
