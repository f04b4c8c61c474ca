package engine_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/hybox-dev/hybox/runtimes/wasm/engine"
)

// wasmModule assembles a small module: count(n) loops n times and
// returns n, spin() loops for ever; with an imported global env.g and/or a
// global of its own, so that the guard's index comes after them, and a
// memory of its own or env.m.
func wasmModule(importGlobal, ownGlobal bool) []byte {
	sec := func(id byte, body ...byte) []byte {
		return append([]byte{id, byte(len(body))}, body...)
	}
	b := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	b = append(b, sec(1, 2, 0x60, 1, 0x7f, 1, 0x7f, 0x60, 0, 0)...)
	if importGlobal { // and the memory
		b = append(b, sec(2, 2, 3, 'e', 'n', 'v', 1, 'g', 0x03, 0x7f, 0x00, 3, 'e', 'n', 'v', 1, 'm', 0x02, 0x00, 0x01)...)
	}
	b = append(b, sec(3, 2, 0, 1)...)
	if !importGlobal {
		b = append(b, sec(5, 1, 0x00, 0x01)...)
	}
	if ownGlobal {
		b = append(b, sec(6, 1, 0x7f, 0x00, 0x41, 0x07, 0x0b)...)
	}
	b = append(b, sec(7, 2, 5, 'c', 'o', 'u', 'n', 't', 0x00, 0, 4, 's', 'p', 'i', 'n', 0x00, 1)...)
	count := []byte{1, 1, 0x7f, // one i32 local
		0x02, 0x40, 0x03, 0x40, // block, loop
		0x20, 0, 0x45, 0x0d, 1, // n == 0: out
		0x20, 0, 0x41, 1, 0x6b, 0x21, 0, // n--
		0x20, 1, 0x41, 1, 0x6a, 0x21, 1, // acc++
		0x0c, 0, 0x0b, 0x0b, // br to loop; ends
		0x20, 1, 0x0b}
	spin := []byte{0, 0x03, 0x40, 0x0c, 0, 0x0b, 0x0b}
	code := []byte{2, byte(len(count))}
	code = append(code, count...)
	code = append(code, byte(len(spin)))
	code = append(code, spin...)
	return append(b, sec(10, code...)...)
}

// envModule exports the global g and the memory m that
// wasmModule(true, ...) imports.
var envModule = []byte{0, 'a', 's', 'm', 1, 0, 0, 0,
	5, 3, 1, 0x00, 0x01,
	6, 6, 1, 0x7f, 0x00, 0x41, 0x05, 0x0b,
	7, 9, 2, 1, 'g', 0x03, 0, 1, 'm', 0x02, 0}

func TestGuard(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name                    string
		importGlobal, ownGlobal bool
	}{
		{"no globals", false, false},
		{"an imported global and memory", true, false},
		{"a global of its own", false, true},
		{"both", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := wazero.NewRuntime(ctx) // without wazero's termination checks
			defer rt.Close(ctx)
			if _, err := rt.InstantiateWithConfig(ctx, envModule, wazero.NewModuleConfig().WithName("env")); err != nil {
				t.Fatal(err)
			}
			plain := wasmModule(tc.importGlobal, tc.ownGlobal)
			if _, err := rt.CompileModule(ctx, plain); err != nil {
				t.Fatalf("the test module itself: %v", err)
			}
			guarded, err := engine.Guard(plain)
			if err != nil {
				t.Fatal(err)
			}
			mod, err := rt.InstantiateWithConfig(ctx, guarded, wazero.NewModuleConfig().WithName(""))
			if err != nil {
				t.Fatalf("instantiate the guarded module: %v", err)
			}
			// The guard is a mutable i32 global of its own, zero.
			g, ok := mod.ExportedGlobal(engine.GuardExport).(api.MutableGlobal)
			if !ok || g.Type() != api.ValueTypeI32 || g.Get() != 0 || engine.Stopped(mod) {
				t.Fatalf("the guard global: %v (mutable %v)", g, ok)
			}
			// Loops work as before.
			res, err := mod.ExportedFunction("count").Call(ctx, 100000)
			if err != nil || res[0] != 100000 {
				t.Fatalf("count(100000) = %v, %v", res, err)
			}
			// A loop that never ends stops once the guard is set.
			done := make(chan error, 1)
			go func() {
				_, err := mod.ExportedFunction("spin").Call(ctx)
				done <- err
			}()
			select {
			case err := <-done:
				t.Fatalf("spin returned before it was stopped: %v", err)
			case <-time.After(50 * time.Millisecond):
			}
			if !engine.Stop(mod) || !engine.Stopped(mod) {
				t.Fatal("Stop did not set the guard")
			}
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "unreachable") {
					t.Fatalf("spin after Stop: %v, want the guard's trap", err)
				}
			case <-time.After(time.Minute):
				t.Fatal("spin did not stop")
			}
			// And so does every later call.
			if _, err := mod.ExportedFunction("count").Call(ctx, 10); err == nil {
				t.Error("count after Stop succeeded")
			}
		})
	}
}

// TestGuardLostRace: Stop writes the fuel while the guest runs; when the
// write lands between the guest's look at its fuel and its decrement, the
// fuel is left at -1. The guest must still look at the guard at its next
// loop iteration, not four billion iterations later.
func TestGuardLostRace(t *testing.T) {
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	guarded, err := engine.Guard(wasmModule(false, false))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := rt.InstantiateWithConfig(ctx, guarded, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		t.Fatal(err)
	}
	g, gok := mod.ExportedGlobal(engine.GuardExport).(api.MutableGlobal)
	f, fok := mod.ExportedGlobal(engine.FuelExport).(api.MutableGlobal)
	if !gok || !fok {
		t.Fatal("the guard or the fuel is not an exported mutable global")
	}
	g.Set(1)
	f.Set(api.EncodeI32(-1))
	if res, err := mod.ExportedFunction("count").Call(ctx, 100000); err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("count(100000) with the guard set and the fuel at -1 = %v, %v; want the guard's trap", res, err)
	}
}

// A module made from a guarded binary stops when the context it was
// instantiated with is done (ImageModule.Instantiate), and an unguarded one
// says so.
func TestStopUnguarded(t *testing.T) {
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	mod, err := rt.Instantiate(ctx, wasmModule(false, false))
	if err != nil {
		t.Fatal(err)
	}
	if engine.Stop(mod) || engine.Stopped(mod) {
		t.Error("Stop of a module without a guard reported success")
	}
}

func TestGuardRefuses(t *testing.T) {
	valid := wasmModule(false, false)
	unknownOp := append([]byte(nil), valid...)
	// spin's body starts at len-6: make its loop's br an undefined opcode.
	unknownOp[len(unknownOp)-4] = 0xf0
	for name, bin := range map[string][]byte{
		"empty":              nil,
		"not wasm":           []byte("#!/bin/sh\necho hi\n"),
		"version 2":          {0, 'a', 's', 'm', 2, 0, 0, 0},
		"truncated section":  valid[:len(valid)-3],
		"an unknown opcode":  unknownOp,
		"a section too long": append(append([]byte(nil), valid[:8]...), 1, 0x7f),
		"no memory":          envModule[:8],
	} {
		if _, err := engine.Guard(bin); !errors.Is(err, engine.ErrUnguardable) {
			t.Errorf("%s: %v, want ErrUnguardable", name, err)
		}
	}
}

// The guests themselves: every pinned or built guest found in the guest
// directory is guarded and still compiles.
func TestGuardGuests(t *testing.T) {
	dir := os.Getenv("HYBOX_GUEST_DIR")
	if dir == "" {
		t.Skip("HYBOX_GUEST_DIR is not set (make test sets it)")
	}
	names, _ := filepath.Glob(filepath.Join(dir, "*.wasm"))
	if len(names) == 0 {
		t.Skipf("no guests in %s (make guests)", dir)
	}
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().WithDebugInfoEnabled(false))
	defer rt.Close(ctx)
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		g, err := engine.Guard(b)
		if err != nil {
			t.Errorf("%s: %v", filepath.Base(name), err)
			continue
		}
		if _, err := rt.CompileModule(ctx, g); err != nil {
			t.Errorf("%s guarded does not compile: %v", filepath.Base(name), err)
		}
	}
}

// FuzzGuard: Guard never panics, and what it makes of a module wazero
// accepts is a module wazero accepts.
func FuzzGuard(f *testing.F) {
	for _, seed := range [][]byte{wasmModule(false, false), wasmModule(true, true), wasmModule(false, true), envModule} {
		f.Add(seed)
	}
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	f.Fuzz(func(t *testing.T, bin []byte) {
		out, err := engine.Guard(bin)
		if err != nil {
			return
		}
		in, ierr := rt.CompileModule(ctx, bin)
		if ierr != nil {
			return
		}
		_ = in.Close(ctx)
		cm, err := rt.CompileModule(ctx, out)
		if err != nil {
			t.Fatalf("the guarded form of a valid module does not compile: %v", err)
		}
		_ = cm.Close(ctx)
	})
}
