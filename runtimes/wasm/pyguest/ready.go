package pyguest

import (
	"context"
	"encoding/json"
	"os"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/internal/pydriver"
	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
	"github.com/hybox-dev/hybox/runtimes/wasm/wasmfs"
)

// Ready clones. A context of the source build costs, when it is made, an
// instantiation (about 0.5 ms, mostly the function table) and, in its first
// cell, a few hundred copy-on-write page faults (about 1 ms): little for one
// context, but a burst of fifty new sandboxes on two cores queues them all.
// So the Manager keeps Options.ReadyClones contexts cloned ahead and warmed
// (their first, hidden cell has run: driver.py's init "warm"), in
// Options.ReadyCwd, with an unbound filesystem (a staged wasmfs.Switch,
// which shows only that directory) and no network; a new context takes one
// and binds it to its sandbox (root, memory limit, egress), and when it
// starts in ReadyCwd its first cell needs no init request and costs little
// more than a warm one. The pool is refilled one clone at
// a time in the background, only once no clone has been taken for
// refillDelay, so that refilling does not compete with the burst it
// refills after. Nothing of a sandbox reaches a clone before it is taken,
// and a clone is taken once.

// warmClone makes one ready clone.
//
// # Errors
// The clone's or its warm-up's.
func (m *Manager) warmClone(ctx context.Context) (*rinstance, error) {
	// Warmed in ReadyCwd, which the staged Switch shows before the
	// workspace is bound: a context that starts there needs no init.
	cwd := m.opts.ReadyCwd
	sw := wasmfs.NewStagedSwitch(cwd)
	ri, err := m.rx.clone(ctx, m.base, sw, nil, m.opts.MemoryLimitBytes, m.opts.OutputLimitBytes)
	if err != nil {
		return nil, err
	}
	ri.sw = sw
	init, _ := json.Marshal(map[string]any{"cwd": cwd, "env": map[string]string{"HOME": cwd}, "clone": true, "warm": true})
	e := &execution{out: discard{}, done: make(chan struct{}), overflow: make(chan struct{})}
	if _, err := ri.exec(ctx, pydriver.AppendRequest(nil, pydriver.RequestInit, init), e); err != nil {
		ri.close(err)
		return nil, err
	}
	return ri, nil
}

// takeReady returns a ready clone bound to root, capped at memLimit bytes,
// its requests going through eg; nil when none is ready (or none can take
// that limit: the caller then clones one, which reports the error).
func (m *Manager) takeReady(root *os.Root, memLimit int64, eg engine.Egress) *rinstance {
	m.mu.Lock()
	var ri *rinstance
	if n := len(m.ready); n > 0 && !m.closed {
		ri = m.ready[n-1]
		m.ready[n-1] = nil
		m.ready = m.ready[:n-1]
	}
	m.mu.Unlock()
	if ri == nil {
		return nil
	}
	m.taken()
	if uint64(memLimit) < ri.linearMemoryBytes() {
		ri.close(ErrClosed)
		return nil
	}
	ri.limit.Set(memLimit)
	ri.egress.set(eg)
	ri.sw.Bind(root)
	return ri
}

// discard is the Output of a warm-up cell.
type discard struct{}

func (discard) Stdout([]byte)            {}
func (discard) Stderr([]byte)            {}
func (discard) Result(map[string]string) {}

var _ execd.Output = discard{}
