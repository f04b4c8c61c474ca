package wasm

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
	"github.com/hybox-dev/hybox/runtimes/wasm/jsguest"
	"github.com/hybox-dev/hybox/runtimes/wasm/pyguest"
)

// SetupOptions configures Setup.
type SetupOptions struct {
	Engine *engine.Engine // required
	// NPMPython selects the npm build of CPython even when the source build
	// (engine.PythonManifest in the engine's guest directory) is present.
	NPMPython          bool
	PythonPool         int           // pre-initialised interpreters of the npm build (0 = pyguest default)
	PythonReady        int           // warmed clones of the source build kept ready (0 = pyguest default, negative = none)
	DefaultMemoryBytes int64         // per guest instance when a sandbox asks for none
	OutputLimitBytes   int64         // per execution
	Exec               execd.Options // execd settings shared by every sandbox
	// ImageDir keeps the Python memory image across restarts, so that
	// contexts saved before a restart can be restored (default: "images"
	// in the engine's cache directory; none without one).
	ImageDir string
	// SaveDelay: see Options.SaveDelay.
	SaveDelay time.Duration
	// AllowedHostPaths: see Options.AllowedHostPaths.
	AllowedHostPaths []string
}

// Setup starts the Python and JavaScript guests on eng and returns the
// backend, plus a function that stops the guests. Python is the source
// build when its manifest is in the engine's guest directory and it starts,
// else the npm build; Runtime.PythonGuest says which and why.
//
// # Errors
// When a guest cannot be compiled or started (for example, missing files).
func Setup(ctx context.Context, o SetupOptions) (*Runtime, func() error, error) {
	if o.Engine == nil {
		return nil, nil, errors.New("wasm: Engine is required")
	}
	if o.DefaultMemoryBytes <= 0 {
		o.DefaultMemoryBytes = 512 << 20
	}
	if o.ImageDir == "" && o.Engine.CacheDir() != "" {
		o.ImageDir = filepath.Join(o.Engine.CacheDir(), "images")
	}
	pyOpts := pyguest.Options{Engine: o.Engine, PoolSize: o.PythonPool, ReadyClones: o.PythonReady, ReadyCwd: defaultCwd,
		MemoryLimitBytes: o.DefaultMemoryBytes, OutputLimitBytes: o.OutputLimitBytes, ImageDir: o.ImageDir}
	var py *pyguest.Manager
	var pyNote string
	if !o.NPMPython {
		// The source build when it is there and works; else the npm one.
		b, err := engine.LoadPythonBuild(o.Engine.GuestDir())
		if err == nil {
			so := pyOpts
			so.Build = &b
			py, err = pyguest.NewManager(ctx, so)
		}
		if err != nil {
			pyNote = fmt.Sprintf(" (the source build is unavailable: %v)", err)
		}
	}
	if py == nil {
		var err error
		if py, err = pyguest.NewManager(ctx, pyOpts); err != nil {
			return nil, nil, fmt.Errorf("python guest: %w", err)
		}
	}
	js, err := jsguest.NewManager(ctx, jsguest.Options{Engine: o.Engine,
		MemoryLimitBytes: o.DefaultMemoryBytes, OutputLimitBytes: o.OutputLimitBytes})
	if err != nil {
		_ = py.Close()
		return nil, nil, fmt.Errorf("javascript guest: %w", err)
	}
	if o.Exec.OutputLimitBytes == 0 {
		o.Exec.OutputLimitBytes = o.OutputLimitBytes
	}
	rt, err := New(Options{Python: py, JavaScript: js, Exec: o.Exec, DefaultMemoryBytes: o.DefaultMemoryBytes, SaveDelay: o.SaveDelay,
		AllowedHostPaths: o.AllowedHostPaths})
	if err != nil {
		_ = py.Close()
		_ = js.Close()
		return nil, nil, err
	}
	rt.python = py.Describe() + pyNote
	stop := func() error { return errors.Join(py.Close(), js.Close()) }
	return rt, stop, nil
}
