package runtimes

import (
	"context"
	"errors"
	"net/http"
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
	r, err := NewRouter([]Runtime{fakeRuntime{"wasm"}, fakeRuntime{"runc"}},
		append([]ImageRule{{Pattern: "python:*", Runtime: "runc"}}, BuiltinImageRules...), "wasm")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		spec    Spec
		want    string
		wantErr error
	}{
		{name: "wasm scheme", spec: Spec{Image: "wasm://default"}, want: "wasm"},
		{name: "code interpreter", spec: Spec{Image: "opensandbox/code-interpreter:v1.0.1"}, want: "wasm"},
		{name: "code interpreter registry", spec: Spec{Image: "docker.io/opensandbox/code-interpreter:latest"}, want: "wasm"},
		{name: "configured rule", spec: Spec{Image: "python:3.12"}, want: "runc"},
		{name: "default", spec: Spec{Image: "ubuntu"}, want: "wasm"},
		{name: "extension wins", spec: Spec{Image: "wasm://default", Extensions: map[string]string{ExtensionRuntime: "RUNC"}}, want: "runc"},
		{name: "unknown runtime", spec: Spec{Image: "x", Extensions: map[string]string{ExtensionRuntime: "kata"}}, wantErr: ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rt, err := r.Select(tc.spec)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
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
	if _, err := NewRouter([]Runtime{fakeRuntime{"wasm"}}, nil, "runc"); err == nil {
		t.Fatal("NewRouter accepted a default runtime that is not registered")
	}
}
