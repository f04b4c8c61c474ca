package runtimes

import (
	"fmt"
	"path"
	"sort"
	"strings"
)

// ImageRule routes images whose reference matches Pattern (path.Match
// syntax, also matched against the reference without its tag) to Runtime.
type ImageRule struct {
	Pattern string `toml:"pattern" json:"pattern"`
	Runtime string `toml:"runtime" json:"runtime"`
}

// BuiltinImageRules send wasm:// images and the OpenSandbox code
// interpreter images to the wasm backend.
var BuiltinImageRules = []ImageRule{
	{Pattern: "wasm://*", Runtime: "wasm"},
	{Pattern: "opensandbox/code-interpreter*", Runtime: "wasm"},
	{Pattern: "*/opensandbox/code-interpreter*", Runtime: "wasm"},
}

// WasmRuntime is the name of the wasm backend's runtime; every other
// runtime runs OCI images (containers).
const WasmRuntime = "wasm"

// Selector picks the runtime of a sandbox and never guesses:
// extensions["hybox.io/runtime"] wins; then the first matching image rule
// (configured rules, then BuiltinImageRules: wasm:// images and the code
// interpreter images go to wasm); any other image is an OCI image
// reference and goes to the container default.
type Selector struct {
	runtimes map[string]Runtime
	rules    []ImageRule
	ociDef   string
}

// NewSelector builds a Selector. Rules are tried in order (configured rules
// should come before BuiltinImageRules). ociDefault is the container
// runtime of OCI images no rule names ("" = "runc"); it need not be
// registered: when it is not, creating such a sandbox fails with a clear
// error, and wasm sandboxes still work.
//
// # Errors
// When ociDefault is the wasm runtime.
func NewSelector(rts []Runtime, rules []ImageRule, ociDefault string) (*Selector, error) {
	if ociDefault == "" {
		ociDefault = "runc"
	}
	if ociDefault == WasmRuntime {
		return nil, fmt.Errorf("the container default runtime (oci.default_runtime) must be a container runtime such as runc or runsc, not %q; wasm sandboxes are chosen by their image (wasm://...) or an image rule", ociDefault)
	}
	r := &Selector{runtimes: map[string]Runtime{}, rules: rules, ociDef: ociDefault}
	for _, rt := range rts {
		r.runtimes[rt.Name()] = rt
	}
	return r, nil
}

// ContainerDefault is the runtime of OCI images no rule names.
func (r *Selector) ContainerDefault() string { return r.ociDef }

// Names lists the registered runtimes.
func (r *Selector) Names() []string {
	var out []string
	for n := range r.runtimes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Get returns the runtime called name.
func (r *Selector) Get(name string) (Runtime, bool) {
	rt, ok := r.runtimes[name]
	return rt, ok
}

// Select returns the runtime for spec and validates spec against it.
//
// # Errors
// ErrInvalid for an unknown runtime name, and for an OCI image when the
// runtime it goes to is not available (no container backend at all:
// "image python:3.12 needs a container runtime; this server has none");
// the runtime's Validate error.
func (r *Selector) Select(spec Spec) (Runtime, error) {
	name, byDefault := r.pick(spec)
	rt, ok := r.runtimes[name]
	switch {
	case ok:
	case byDefault && !r.hasContainers():
		return nil, fmt.Errorf("%w: image %s needs a container runtime; this server has none (start it with --containerd)", ErrInvalid, spec.Image)
	case byDefault:
		return nil, fmt.Errorf("%w: image %s goes to the container default runtime %q (oci.default_runtime), which is not available on this server (available: %s); name one with extensions {%q: ...}", ErrInvalid, spec.Image, name, strings.Join(r.Names(), ", "), ExtensionRuntime)
	default:
		return nil, fmt.Errorf("%w: runtime %q is not available on this server (available: %s)", ErrInvalid, name, strings.Join(r.Names(), ", "))
	}
	if err := rt.Validate(spec); err != nil {
		return nil, err
	}
	return rt, nil
}

// pick names the runtime for spec; byDefault reports that it is the
// container default (no extension, no rule).
func (r *Selector) pick(spec Spec) (name string, byDefault bool) {
	if n := strings.TrimSpace(spec.Extensions[ExtensionRuntime]); n != "" {
		return strings.ToLower(n), false
	}
	for _, rule := range r.rules {
		if MatchImage(rule.Pattern, spec.Image) {
			return rule.Runtime, false
		}
	}
	return r.ociDef, true
}

// hasContainers reports whether any container runtime is registered.
func (r *Selector) hasContainers() bool {
	for n := range r.runtimes {
		if n != WasmRuntime {
			return true
		}
	}
	return false
}

// MatchImage reports whether image matches pattern, with or without the
// image's tag or digest.
func MatchImage(pattern, image string) bool {
	if ok, _ := path.Match(pattern, image); ok {
		return true
	}
	base := image
	if i := strings.Index(base, "@"); i >= 0 {
		base = base[:i]
	}
	if i := strings.LastIndex(base, ":"); i > strings.LastIndex(base, "/") {
		base = base[:i]
	}
	ok, _ := path.Match(pattern, base)
	return ok
}
