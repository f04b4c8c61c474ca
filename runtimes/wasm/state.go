package wasm

// Interpreter state as data. Every Python or JavaScript context of a wasm
// sandbox is a ctxInterp: it wraps the guest's interpreter and, a moment
// after each execution (Options.SaveDelay), writes the interpreter's state
// (engine.State: the memory diff, globals and host data) to
// <sandbox dir>/state/<key>.state, and what execd holds of every context
// (ids, languages, cwd, execution counts, defaults) to
// <sandbox dir>/state/contexts.state. From these files:
//   - Pause writes every context out and drops its instance; the next
//     execution after Resume restores it.
//   - A sandbox restored after a restart (or kill -9) gets its contexts
//     back, each restored on its first execution.
//   - Fork copies the workspace and links the state files into the new
//     sandbox's directory.
// A state file that is damaged, or saved against another interpreter
// image, is refused: the execution that found it fails with a message
// saying so, and the context starts fresh.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
	"github.com/hybox-dev/hybox/runtimes/wasm/pyguest"
)

// ExtensionIsolation selects per-call isolation for a sandbox's code
// executions: "per-call" starts every execution from a fresh interpreter
// (a copy-on-write clone of the memory image), "per-call+workspace" also
// puts the workspace back, after every execution, as it was when the
// sandbox's first execution started.
const ExtensionIsolation = "hybox.io/isolation"

// Isolation modes (values of ExtensionIsolation).
const (
	IsolationPerCall          = "per-call"
	IsolationPerCallWorkspace = "per-call+workspace"
)

const (
	manifestFile = "contexts.state"
	manifestKind = "wasm-contexts"
	stateSuffix  = ".state"
)

// manifest is what execd holds of a sandbox's contexts, saved.
type manifest struct {
	Contexts []savedContext `json:"contexts"`
}

type savedContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
	Count    int    `json:"count"`
	Default  bool   `json:"default,omitempty"`
	Key      string `json:"key,omitempty"`    // its state file; "" = none (starts fresh)
	Reseed   bool   `json:"reseed,omitempty"` // a fork's copy: reseed when restored
}

func (s *Sandbox) stateDir() string { return filepath.Join(s.dir, "state") }

func (s *Sandbox) statePath(key string) string {
	return filepath.Join(s.stateDir(), key+stateSuffix)
}

// ctxInterp is a context of a wasm sandbox whose state can be saved.
type ctxInterp struct {
	s     *Sandbox
	guest Guest
	cwd   string
	key   string

	prep    sync.WaitGroup // a fresh interpreter being made (per-call isolation)
	run     sync.Mutex     // serialises Run, save, park
	saving  sync.Mutex     // held while saved pages alias the live memory: Close waits
	mu      sync.Mutex     // guards the fields below
	inner   execd.Interpreter
	hasFile bool // the state file exists
	saved   bool // the state file (or its absence) is the current state
	reseed  bool
	closed  bool
	timer   *time.Timer
	// stopSave abandons a save the timer started: the next execution
	// does not wait for a large context's pages to reach the disk.
	stopSave context.CancelFunc
}

var _ execd.Interpreter = (*ctxInterp)(nil)

func (s *Sandbox) newCtxInterp(g Guest, cwd string) *ctxInterp {
	return &ctxInterp{s: s, guest: g, cwd: cwd, key: newKey()}
}

// Run restores the interpreter if it was saved, runs code and schedules a
// save (or, under per-call isolation, drops the interpreter).
func (it *ctxInterp) Run(ctx context.Context, code string, out execd.Output) (*execd.ExecError, error) {
	it.mu.Lock()
	if it.stopSave != nil {
		it.stopSave()
	}
	it.mu.Unlock()
	it.run.Lock()
	defer it.run.Unlock()
	s := it.s
	if s.isolation == IsolationPerCallWorkspace {
		s.isoMu.Lock()
		defer s.isoMu.Unlock()
		if err := s.snapshotWorkspace(); err != nil {
			return nil, fmt.Errorf("per-call isolation: save the workspace: %w", err)
		}
		defer func() {
			if err := s.resetWorkspace(); err != nil {
				slog.Warn("per-call isolation: put the workspace back", "err", err)
			}
		}()
	}
	inner, err := it.ensure(ctx)
	if err != nil {
		return nil, err
	}
	xerr, err := inner.Run(ctx, code, out)
	it.mu.Lock()
	defer it.mu.Unlock()
	if s.isolation != "" {
		// The next execution starts from a fresh clone: make it now, off
		// the next execution's path.
		it.inner = nil
		if it.closed {
			go inner.Close()
			return xerr, err
		}
		it.prep.Add(1) // it.mu held and not closed: Close has not begun to Wait
		go func() {
			defer it.prep.Done()
			_ = inner.Close()
			it.prepare()
		}()
		it.scheduleLocked() // the manifest keeps its execution count
		return xerr, err
	}
	it.saved = false
	if s.isPaused() {
		// Paused while this execution ran: write it out now.
		it.mu.Unlock()
		if perr := it.saveLocked(context.WithoutCancel(ctx), true); perr != nil {
			slog.Warn("save code context after pause", "err", perr)
		}
		it.mu.Lock()
		return xerr, err
	}
	it.scheduleLocked()
	return xerr, err
}

// prepare starts a fresh interpreter for the next execution unless one
// is there (per-call isolation).
func (it *ctxInterp) prepare() {
	it.mu.Lock()
	skip := it.inner != nil || it.closed
	it.mu.Unlock()
	if skip {
		return
	}
	s := it.s
	inner, err := it.guest.NewInterpreter(context.Background(), s.root, it.cwd, s.mem, s.egress)
	if err != nil {
		return // the next execution tries again, and reports the error
	}
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.inner != nil || it.closed {
		go inner.Close()
		return
	}
	it.inner = inner
}

// ensure returns the live interpreter, restoring or starting it.
func (it *ctxInterp) ensure(ctx context.Context) (execd.Interpreter, error) {
	it.mu.Lock()
	inner, hasFile, reseed, closed := it.inner, it.hasFile, it.reseed, it.closed
	it.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("wasm: %w: the context was closed", execd.ErrContextLost)
	}
	if inner != nil {
		return inner, nil
	}
	s := it.s
	var err error
	if hasFile {
		inner, err = it.restore(ctx, reseed)
		if err != nil {
			// Refused: the execution says why; the next one starts fresh.
			_ = os.Remove(s.statePath(it.key))
			it.mu.Lock()
			it.hasFile, it.saved = false, false
			it.mu.Unlock()
			return nil, fmt.Errorf("the saved state of this context was refused (%v): %w", err, execd.ErrContextLost)
		}
	} else {
		inner, err = it.guest.NewInterpreter(ctx, s.root, it.cwd, s.mem, s.egress)
		if err != nil {
			return nil, err
		}
	}
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.closed {
		go inner.Close()
		return nil, fmt.Errorf("wasm: %w: the context was closed", execd.ErrContextLost)
	}
	it.inner, it.reseed = inner, false
	return inner, nil
}

func (it *ctxInterp) restore(ctx context.Context, reseed bool) (execd.Interpreter, error) {
	st, err := engine.MapStateFile(it.s.statePath(it.key))
	if err != nil {
		return nil, err
	}
	defer st.Close() // an instance that mapped its pages keeps its own mapping
	return it.guest.RestoreInterpreter(ctx, it.s.root, it.s.mem, it.s.egress, st, reseed)
}

// scheduleLocked arms the save timer (it.mu held).
func (it *ctxInterp) scheduleLocked() {
	if it.closed {
		return
	}
	if it.timer == nil {
		it.timer = time.AfterFunc(it.s.rt.opts.SaveDelay, func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			it.mu.Lock()
			it.stopSave = cancel
			it.mu.Unlock()
			err := it.save(ctx, false)
			it.mu.Lock()
			it.stopSave = nil
			if errors.Is(err, context.Canceled) && !it.closed {
				it.scheduleLocked() // an execution came first; save after it
				err = nil
			}
			it.mu.Unlock()
			if err != nil {
				slog.Warn("save code context", "err", err)
			}
		})
		return
	}
	it.timer.Reset(it.s.rt.opts.SaveDelay)
}

// save writes the context's state unless it is already saved; with park
// it also drops the interpreter (the next Run restores it).
func (it *ctxInterp) save(ctx context.Context, park bool) error {
	it.run.Lock()
	defer it.run.Unlock()
	return it.saveLocked(ctx, park)
}

// saveLocked is save with it.run held.
func (it *ctxInterp) saveLocked(ctx context.Context, park bool) error {
	it.mu.Lock()
	inner, saved, closed := it.inner, it.saved, it.closed
	it.mu.Unlock()
	if closed {
		return nil
	}
	if it.s.isolation != "" {
		return it.s.persist() // its id and count; there is no state to keep
	}
	if !saved && inner != nil {
		it.saving.Lock()
		defer it.saving.Unlock()
		st, err := it.guest.SaveState(ctx, inner)
		if errors.Is(err, pyguest.ErrNoState) {
			return nil // the npm build: the context lives in memory only
		}
		if err != nil {
			return err
		}
		path := it.s.statePath(it.key)
		if st == nil {
			_ = os.Remove(path)
		} else if err := os.MkdirAll(it.s.stateDir(), 0o755); err != nil {
			return err
		} else if err := engine.WriteStateFileContext(ctx, path, st); err != nil {
			return err
		}
		it.mu.Lock()
		it.saved, it.hasFile = true, st != nil
		it.mu.Unlock()
		if err := it.s.persist(); err != nil {
			return err
		}
	}
	if park && inner != nil {
		it.mu.Lock()
		it.inner = nil
		it.mu.Unlock()
		_ = inner.Close()
	}
	return nil
}

// Close closes the interpreter. When the sandbox is not closing (the
// context was deleted, or lost), its state file goes too.
func (it *ctxInterp) Close() error {
	it.mu.Lock()
	if it.closed {
		it.mu.Unlock()
		return nil
	}
	it.closed = true
	inner := it.inner
	it.inner = nil
	if it.timer != nil {
		it.timer.Stop()
	}
	it.mu.Unlock()
	if inner != nil {
		it.saving.Lock()  // not while a save reads its memory
		_ = inner.Close() // interrupts a Run in progress
		it.saving.Unlock()
	}
	it.prep.Wait() // it closes what it made, seeing closed
	if !it.s.isClosing() {
		_ = os.Remove(it.s.statePath(it.key))
		go func() { _ = it.s.persist() }()
	}
	return nil
}

// wrappers returns the sandbox's saveable contexts.
func (s *Sandbox) wrappers() []*ctxInterp {
	s.mu.Lock()
	h := s.execd
	s.mu.Unlock()
	if h == nil {
		return nil
	}
	var out []*ctxInterp
	for _, ci := range h.Contexts() {
		if w, ok := ci.Interp.(*ctxInterp); ok {
			out = append(out, w)
		}
	}
	return out
}

// persist writes the manifest of the sandbox's contexts.
func (s *Sandbox) persist() error {
	s.mu.Lock()
	h := s.execd
	s.mu.Unlock()
	if h == nil {
		return nil
	}
	s.persistMu.Lock()
	defer s.persistMu.Unlock()
	var m manifest
	for _, ci := range h.Contexts() {
		sc := savedContext{ID: ci.ID, Language: ci.Language, Cwd: ci.Cwd, Count: ci.Count, Default: ci.Default}
		if w, ok := ci.Interp.(*ctxInterp); ok {
			w.mu.Lock()
			if w.hasFile {
				sc.Key, sc.Reseed = w.key, w.reseed
			}
			w.mu.Unlock()
		}
		m.Contexts = append(m.Contexts, sc)
	}
	return writeManifest(s.stateDir(), m)
}

func writeManifest(dir string, m manifest) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return engine.WriteStateFile(filepath.Join(dir, manifestFile), &engine.State{Kind: manifestKind, Host: b})
}

func readManifest(dir string) (manifest, error) {
	var m manifest
	st, err := engine.ReadStateFile(filepath.Join(dir, manifestFile))
	if err != nil {
		return m, err
	}
	if st.Kind != manifestKind {
		return m, fmt.Errorf("%w: %s is not a list of contexts", engine.ErrState, manifestFile)
	}
	if err := json.Unmarshal(st.Host, &m); err != nil {
		return m, fmt.Errorf("%w: %s: %v", engine.ErrState, manifestFile, err)
	}
	return m, nil
}

// adoptSaved gives the handler the contexts saved in the manifest, each
// to be restored on its first execution.
func (s *Sandbox) adoptSaved(h *execd.Handler) {
	// Temporary files of writes a killed process did not finish.
	if tmps, _ := filepath.Glob(filepath.Join(s.stateDir(), ".state-*")); len(tmps) > 0 {
		for _, p := range tmps {
			_ = os.Remove(p)
		}
	}
	m, err := readManifest(s.stateDir())
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		slog.Warn("saved code contexts refused; the sandbox starts without them", "dir", s.dir, "err", err)
		return
	}
	for _, sc := range m.Contexts {
		ci := execd.ContextInfo{ID: sc.ID, Language: sc.Language, Cwd: sc.Cwd, Count: sc.Count, Default: sc.Default}
		if g := s.guest(sc.Language); g != nil {
			w := s.newCtxInterp(g, sc.Cwd)
			if sc.Key != "" {
				w.key, w.hasFile, w.saved, w.reseed = sc.Key, true, true, sc.Reseed
			}
			ci.Interp = w
		}
		if err := h.AddContext(ci); err != nil {
			slog.Warn("saved code context refused", "id", sc.ID, "err", err)
		}
	}
}

// guest returns the guest of language, nil for bash.
func (s *Sandbox) guest(language string) Guest {
	switch language {
	case "python":
		return s.rt.opts.Python
	case "javascript":
		return s.rt.opts.JavaScript
	}
	return nil
}

func (s *Sandbox) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// parkAll writes every context that is not running out (and with park
// drops its instance). A running context is not waited for: under Pause
// it parks itself when its execution ends; at Close its last saved state
// (from before the execution) stands.
func (s *Sandbox) parkAll(ctx context.Context, park bool) error {
	var errs []error
	for _, w := range s.wrappers() {
		if !w.run.TryLock() {
			continue
		}
		err := w.saveLocked(ctx, park)
		w.run.Unlock()
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *Sandbox) isPaused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused
}

var _ runtimes.Forker = (*Runtime)(nil)

// Fork makes a new sandbox (spec: its id and directory) with a copy of
// src's workspace and of every code context: their ids, execution counts
// and interpreter state. Executions running in src are waited for; src
// keeps its state. A context's copy is restored on its first execution
// and gets its own random seed.
//
// # Errors
// ErrInvalid when src is not a wasm sandbox; file system errors.
func (r *Runtime) Fork(ctx context.Context, src runtimes.Sandbox, spec runtimes.Spec) (runtimes.Sandbox, error) {
	s, ok := src.(*Sandbox)
	if !ok {
		return nil, fmt.Errorf("%w: not a wasm sandbox", runtimes.ErrInvalid)
	}
	if _, err := s.handler(); err != nil {
		return nil, err
	}
	// Between executions: hold every context while copying.
	ws := s.wrappers()
	for _, w := range ws {
		w.run.Lock()
		defer w.run.Unlock()
	}
	var m manifest
	dst := filepath.Join(spec.Dir, "state")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return nil, err
	}
	for _, w := range ws {
		if err := w.saveLocked(ctx, false); err != nil {
			return nil, fmt.Errorf("fork: save context: %w", err)
		}
	}
	for _, ci := range s.execd.Contexts() {
		sc := savedContext{ID: ci.ID, Language: ci.Language, Cwd: ci.Cwd, Count: ci.Count, Default: ci.Default}
		if w, ok := ci.Interp.(*ctxInterp); ok {
			w.mu.Lock()
			has := w.hasFile
			w.mu.Unlock()
			if has {
				// State files are never written in place (a save
				// renames a new one over): a link is a copy.
				if err := os.Link(s.statePath(w.key), filepath.Join(dst, w.key+stateSuffix)); err != nil {
					return nil, fmt.Errorf("fork: %w", err)
				}
				sc.Key, sc.Reseed = w.key, true
			}
		}
		m.Contexts = append(m.Contexts, sc)
	}
	if err := copyTree(fsDir(spec), filepath.Join(s.dir, "fs")); err != nil {
		return nil, fmt.Errorf("fork: copy the workspace: %w", err)
	}
	if err := writeManifest(dst, m); err != nil {
		return nil, err
	}
	return r.open(spec)
}

// copyTree copies the directories, regular files and symbolic links of
// src to dst (created). A volume mounted in src is left out: its mount
// point is copied as an empty directory.
func copyTree(dst, src string) error {
	skip, err := workspaceMounts(src)
	if err != nil {
		return err
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if err := os.MkdirAll(to, fi.Mode().Perm()|0o700); err != nil {
				return err
			}
			if skip[rel] && rel != "." {
				return filepath.SkipDir
			}
			return nil
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case d.Type().IsRegular():
			return copyFile(to, p)
		}
		return nil // devices, sockets, pipes: not copied
	})
}

func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// snapshotWorkspace keeps a copy of the workspace, once, for per-call
// isolation of files (s.isoMu held).
func (s *Sandbox) snapshotWorkspace() error {
	if s.isoSaved {
		return nil
	}
	snap := filepath.Join(s.stateDir(), "workspace")
	_ = os.RemoveAll(snap)
	if err := copyTree(snap, filepath.Join(s.dir, "fs")); err != nil {
		return err
	}
	s.isoSaved = true
	return nil
}

// resetWorkspace puts the workspace back as snapshotWorkspace saw it; the
// volumes mounted in it are shared storage and keep what they hold.
func (s *Sandbox) resetWorkspace() error {
	ws := filepath.Join(s.dir, "fs")
	keep, err := workspaceMounts(ws)
	if err != nil {
		return err
	}
	if err := clearExcept(ws, ".", keep); err != nil {
		return err
	}
	return copyTree(ws, filepath.Join(s.stateDir(), "workspace"))
}

// holdsMount reports whether a mount point in keep lies below dir.
func holdsMount(dir string, keep map[string]bool) bool {
	for k := range keep {
		if strings.HasPrefix(k, dir+"/") {
			return true
		}
	}
	return false
}

// clearExcept removes everything in the directory rel of root but the
// mount points in keep and the directories on the way to them.
func clearExcept(root, rel string, keep map[string]bool) error {
	ents, err := os.ReadDir(filepath.Join(root, rel))
	if err != nil {
		return err
	}
	for _, e := range ents {
		p := filepath.Join(rel, e.Name())
		if keep[p] {
			continue
		}
		if e.IsDir() && holdsMount(p, keep) {
			if err := clearExcept(root, p, keep); err != nil {
				return err
			}
			continue
		}
		if err := os.RemoveAll(filepath.Join(root, p)); err != nil {
			return err
		}
	}
	return nil
}

// newKey returns a random name for a state file.
func newKey() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
