package runtimes

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
)

type fakeRuntime struct{ name string }

func (f fakeRuntime) Name() string        { return f.name }
func (f fakeRuntime) Validate(Spec) error { return nil }
func (f fakeRuntime) Create(context.Context, Spec) (Sandbox, error) {
	return nil, errors.New("unused")
}
func (f fakeRuntime) Restore(context.Context, Spec) (Sandbox, error) {
	return nil, errors.New("unused")
}
func (f fakeRuntime) Destroy(context.Context, Spec) error { return nil }

var _ http.Handler = http.NotFoundHandler()

func TestRouterSelect(t *testing.T) {
	wasm, runc, runsc := fakeRuntime{"wasm"}, fakeRuntime{"runc"}, fakeRuntime{"runsc"}
	rules := append([]ImageRule{{Pattern: "localhost/tools/*", Runtime: "wasm"}, {Pattern: "debian:*", Runtime: "runsc"}}, BuiltinImageRules...)
	tests := []struct {
		name       string
		rts        []Runtime
		ociDefault string
		spec       Spec
		want       string
		wantErr    string // a part of the error, which wraps ErrInvalid
	}{
		{name: "wasm scheme", rts: []Runtime{wasm}, spec: Spec{Image: "wasm://default"}, want: "wasm"},
		{name: "code interpreter", rts: []Runtime{wasm, runc}, spec: Spec{Image: "opensandbox/code-interpreter:v1.0.1"}, want: "wasm"},
		{name: "code interpreter registry", rts: []Runtime{wasm, runc}, spec: Spec{Image: "docker.io/opensandbox/code-interpreter:latest"}, want: "wasm"},
		{name: "configured rule to wasm", rts: []Runtime{wasm, runc}, spec: Spec{Image: "localhost/tools/x:1"}, want: "wasm"},
		{name: "configured rule to a container runtime", rts: []Runtime{wasm, runc, runsc}, spec: Spec{Image: "debian:12"}, want: "runsc"},
		{name: "OCI image goes to runc", rts: []Runtime{wasm, runc, runsc}, spec: Spec{Image: "python:3.12"}, want: "runc"},
		{name: "OCI image goes to the configured default", rts: []Runtime{wasm, runc, runsc}, ociDefault: "runsc", spec: Spec{Image: "localhost/hybox/python:3-bookworm"}, want: "runsc"},
		{name: "OCI image without containers", rts: []Runtime{wasm}, spec: Spec{Image: "python:3.12"},
			wantErr: "image python:3.12 needs a container runtime; this server has none (start it with --containerd)"},
		{name: "OCI image, default runtime missing", rts: []Runtime{wasm, runc}, ociDefault: "runsc", spec: Spec{Image: "ubuntu"},
			wantErr: `goes to the container default runtime "runsc" (oci.default_runtime), which is not available on this server (available: runc, wasm)`},
		{name: "extension wins", rts: []Runtime{wasm, runc}, spec: Spec{Image: "wasm://default", Extensions: map[string]string{ExtensionRuntime: "RUNC"}}, want: "runc"},
		{name: "extension to wasm", rts: []Runtime{wasm, runc}, spec: Spec{Image: "python:3.12", Extensions: map[string]string{ExtensionRuntime: "wasm"}}, want: "wasm"},
		{name: "unknown runtime", rts: []Runtime{wasm, runc}, spec: Spec{Image: "x", Extensions: map[string]string{ExtensionRuntime: "kata"}},
			wantErr: `runtime "kata" is not available on this server (available: runc, wasm)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewSelector(tc.rts, rules, tc.ociDefault)
			if err != nil {
				t.Fatal(err)
			}
			rt, err := r.Select(tc.spec)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want ErrInvalid containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if rt.Name() != tc.want {
				t.Fatalf("runtime = %s, want %s", rt.Name(), tc.want)
			}
		})
	}
	if _, err := NewSelector([]Runtime{wasm}, nil, "wasm"); err == nil {
		t.Fatal("NewRouter accepted wasm as the container default")
	}
}
