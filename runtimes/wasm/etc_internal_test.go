package wasm

import (
	"slices"
	"strings"
	"testing"

	"github.com/hybox-dev/hybox/runtimes/wasm/wasmfs"
)

// TestSystemDirsReadOnly holds the directories the backend writes and the
// ones wasmfs keeps read-only for guests equal.
func TestSystemDirsReadOnly(t *testing.T) {
	var tops []string
	for _, d := range systemDirs {
		if !wasmfs.IsSystem(d) {
			t.Errorf("%s is written by the backend but not read-only for guests", d)
		}
		if top, _, _ := strings.Cut(d, "/"); !slices.Contains(tops, top) {
			tops = append(tops, top)
		}
	}
	for name := range systemFiles("h", 1<<20) {
		if !wasmfs.IsSystem(name) {
			t.Errorf("%s is written by the backend but not read-only for guests", name)
		}
	}
	if !slices.Equal(tops, wasmfs.SystemDirs()) {
		t.Errorf("backend directories %v, wasmfs read-only directories %v", tops, wasmfs.SystemDirs())
	}
}
