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

// Router picks the runtime of a sandbox: extensions["hybox.io/runtime"]
// wins, then the first matching image rule, then the default.
type Router struct {
	runtimes map[string]Runtime
	rules    []ImageRule
	def      string
}

// NewRouter builds a router. Rules are tried in order (configured rules
// should come before BuiltinImageRules).
//
// # Errors
// When def or a rule names a runtime that is not registered.
func NewRouter(rts []Runtime, rules []ImageRule, def string) (*Router, error) {
	r := &Router{runtimes: map[string]Runtime{}, rules: rules, def: def}
	for _, rt := range rts {
		r.runtimes[rt.Name()] = rt
	}
	if _, ok := r.runtimes[def]; !ok {
		return nil, fmt.Errorf("default runtime %q is not available (have %s)", def, strings.Join(r.Names(), ", "))
	}
	return r, nil
}

// Names lists the registered runtimes.
func (r *Router) Names() []string {
	var out []string
	for n := range r.runtimes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Get returns the runtime called name.
func (r *Router) Get(name string) (Runtime, bool) {
	rt, ok := r.runtimes[name]
	return rt, ok
}

// Select returns the runtime for spec and validates spec against it.
//
// # Errors
// ErrInvalid for an unknown runtime name; the runtime's Validate error.
func (r *Router) Select(spec Spec) (Runtime, error) {
	name := r.pick(spec)
	rt, ok := r.runtimes[name]
	if !ok {
		return nil, fmt.Errorf("%w: runtime %q is not available on this server (available: %s)", ErrInvalid, name, strings.Join(r.Names(), ", "))
	}
	if err := rt.Validate(spec); err != nil {
		return nil, err
	}
	return rt, nil
}

func (r *Router) pick(spec Spec) string {
	if n := strings.TrimSpace(spec.Extensions[ExtensionRuntime]); n != "" {
		return strings.ToLower(n)
	}
	for _, rule := range r.rules {
		if MatchImage(rule.Pattern, spec.Image) {
			return rule.Runtime
		}
	}
	return r.def
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
