package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// PythonManifest is the file, in the guest directory, that
// scripts/guests/build-python.sh writes beside the CPython it builds from
// Debian's source packages.
const PythonManifest = "python-hybox.json"

// PythonBuild describes the source-built CPython guest: a WASI reactor
// (exports hybox_init, hybox_run, hybox_slots, hybox_main) and its stdlib
// zip, each with the digest recorded when it was built.
type PythonBuild struct {
	Python  string // Debian source package and version, e.g. "python3.11 3.11.2-6+deb12u8"
	Inputs  string // hash of the build's inputs (the cache key)
	Wasm    Guest  // the reactor module
	Stdlib  Guest  // the stdlib zip, mounted read-only in every guest
	Zlib    string // source package of the zlib built in
	Sqlite3 string // source package of the sqlite3 built in
}

// String describes the build for logs.
func (b PythonBuild) String() string {
	return fmt.Sprintf("CPython from Debian source %s (wasm32-wasi reactor, inputs %s)", b.Python, b.Inputs)
}

// LoadPythonBuild reads the manifest of the source-built CPython in dir.
//
// # Errors
// ErrGuestMissing when there is no manifest (the build has not run) or it
// is malformed.
func LoadPythonBuild(dir string) (PythonBuild, error) {
	path := filepath.Join(dir, PythonManifest)
	b, err := os.ReadFile(path)
	if err != nil {
		return PythonBuild{}, fmt.Errorf("%w: %v (run `make guests`)", ErrGuestMissing, err)
	}
	var m struct {
		Python  string `json:"python"`
		Zlib    string `json:"zlib"`
		Sqlite3 string `json:"sqlite3"`
		Inputs  string `json:"inputs"`
		Wasm    struct {
			Name, SHA256 string
		} `json:"wasm"`
		Stdlib struct {
			Name, SHA256 string
		} `json:"stdlib"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return PythonBuild{}, fmt.Errorf("%w: %s: %v", ErrGuestMissing, path, err)
	}
	if m.Wasm.Name == "" || m.Stdlib.Name == "" || len(m.Wasm.SHA256) != 64 || len(m.Stdlib.SHA256) != 64 ||
		filepath.Base(m.Wasm.Name) != m.Wasm.Name || filepath.Base(m.Stdlib.Name) != m.Stdlib.Name {
		return PythonBuild{}, fmt.Errorf("%w: %s: incomplete manifest", ErrGuestMissing, path)
	}
	return PythonBuild{
		Python: m.Python, Inputs: m.Inputs, Zlib: m.Zlib, Sqlite3: m.Sqlite3,
		Wasm:   Guest{Name: m.Wasm.Name, SHA256: m.Wasm.SHA256},
		Stdlib: Guest{Name: m.Stdlib.Name, SHA256: m.Stdlib.SHA256},
	}, nil
}

// ReadGuest returns the contents of g's file in the guest directory after
// checking its digest.
//
// # Errors
// ErrGuestMissing when the file is absent or its digest differs.
func (e *Engine) ReadGuest(g Guest) ([]byte, error) {
	path := filepath.Join(e.opts.GuestDir, g.Name)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v (run `make guests`)", ErrGuestMissing, path, err)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != g.SHA256 {
		return nil, fmt.Errorf("%w: %s has sha256 %s, want %s", ErrGuestMissing, path, got, g.SHA256)
	}
	return b, nil
}

// ImageModule is a guest compiled without its data segments (SplitData),
// for instances that start from a memory Image; Data holds the segments for
// an instance that starts from scratch.
type ImageModule struct {
	Module wazero.CompiledModule
	Data   []DataSegment
	// Guarded says the module carries the loop guard (Guard) and runs
	// without wazero's termination checks.
	Guarded bool
	rt      wazero.Runtime // the runtime Module is compiled for
}

// Runtime is the runtime the module is compiled for: its instances, and
// the host modules they import, belong there.
func (im *ImageModule) Runtime() wazero.Runtime { return im.rt }

// Instantiate makes an instance of the module with cfg, in the runtime it
// is compiled for. It is stopped when ctx is done: a guarded module's
// guard is set (the call running traps at its next loop iteration); any
// other module is closed by wazero in the call whose context that is
// (pass ctx to the calls). Closing the instance forgets ctx.
//
// # Errors
// What wazero's InstantiateModule returns.
func (im *ImageModule) Instantiate(ctx context.Context, cfg wazero.ModuleConfig) (api.Module, error) {
	mod, err := im.rt.InstantiateModule(ctx, im.Module, cfg)
	if err != nil || !im.Guarded {
		return mod, err
	}
	return &guardedInstance{Module: mod, release: context.AfterFunc(ctx, func() { Stop(mod) })}, nil
}

// guardedInstance is an instance whose guard is set when its context is
// done, until it is closed.
type guardedInstance struct {
	api.Module
	release func() bool
}

func (g *guardedInstance) Close(ctx context.Context) error {
	g.release()
	return g.Module.Close(ctx)
}

// CompileForImages compiles g (digest checked) without its data segments,
// once per engine. It is guarded (Guard) when it can be, so that it runs
// without wazero's termination checks; a guest the guard refuses keeps
// them.
//
// # Errors
// ErrGuestMissing; an error when the module's data cannot be split (see
// SplitData) or it does not compile.
func (e *Engine) CompileForImages(ctx context.Context, g Guest) (*ImageModule, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	key := g.Name + "#images"
	if im, ok := e.images[key]; ok {
		return im, nil
	}
	b, err := e.ReadGuest(g)
	if err != nil {
		return nil, err
	}
	stripped, segs, err := SplitData(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", g.Name, err)
	}
	rt, guarded := e.rt, false
	var cm wazero.CompiledModule
	if gb, err := Guard(stripped); err == nil {
		// A guarded module that does not compile (a layout the guard does
		// not foresee) runs unguarded, with wazero's checks.
		if cm, err = e.guarded.CompileModule(ctx, gb); err == nil {
			rt, guarded = e.guarded, true
		}
	}
	if cm == nil {
		if cm, err = rt.CompileModule(ctx, stripped); err != nil {
			return nil, fmt.Errorf("compile %s: %w", g.Name, err)
		}
	}
	// The segments alias b; keep only them, not the code.
	kept := make([]DataSegment, len(segs))
	for i, s := range segs {
		kept[i] = DataSegment{Offset: s.Offset, Data: append([]byte(nil), s.Data...)}
	}
	im := &ImageModule{Module: cm, Data: kept, Guarded: guarded, rt: rt}
	if e.images == nil {
		e.images = map[string]*ImageModule{}
	}
	e.images[key] = im
	return im, nil
}

// errNoMemory is returned by WriteData for a module without memory.
var errNoMemory = errors.New("module has no memory")

// WriteData copies the segments into mem-like writer w (an api.Memory).
func WriteData(w interface{ Write(uint32, []byte) bool }, segs []DataSegment) error {
	if w == nil {
		return errNoMemory
	}
	for _, s := range segs {
		if !w.Write(s.Offset, s.Data) {
			return fmt.Errorf("data segment at %d (%d bytes) is outside memory", s.Offset, len(s.Data))
		}
	}
	return nil
}
