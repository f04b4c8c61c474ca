package wasm_test

import (
	"context"
	"testing"

	"github.com/hybox-dev/hybox/internal/testenv"
	"github.com/hybox-dev/hybox/runtimes/runtimetest"
	"github.com/hybox-dev/hybox/runtimes/wasm"
)

func TestConformance(t *testing.T) {
	rt, stop, err := wasm.Setup(context.Background(), wasm.SetupOptions{Engine: testenv.Engine(t), PythonPool: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop() })
	runtimetest.Run(t, runtimetest.Config{Runtime: rt, Image: "wasm://default"})
}
