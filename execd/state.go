package execd

import (
	"fmt"
	"sort"

	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// ContextInfo is what the handler holds of one code context, for backends
// that save contexts and bring them back (the wasm tier: pause to disk,
// restart, fork).
type ContextInfo struct {
	ID       string
	Language string // canonical: python, javascript, bash
	Cwd      string
	Count    int  // executions so far
	Default  bool // the default context of its language
	// Interp is the context's interpreter; nil for bash, or when it was
	// lost and the next execution starts a new one.
	Interp Interpreter
}

// Contexts returns the sandbox's code contexts, sorted by id.
func (h *Handler) Contexts() []ContextInfo {
	m := h.codes
	m.mu.Lock()
	defaults := map[string]bool{}
	for _, id := range m.defaults {
		defaults[id] = true
	}
	all := make([]*codeContext, 0, len(m.contexts))
	for _, c := range m.contexts {
		all = append(all, c)
	}
	m.mu.Unlock()
	out := make([]ContextInfo, 0, len(all))
	for _, c := range all {
		c.mu.Lock()
		out = append(out, ContextInfo{ID: c.id, Language: c.language, Cwd: c.cwd, Count: c.count,
			Default: defaults[c.id], Interp: c.interp})
		c.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// AddContext adds a context whose interpreter the backend made (restored
// from saved state), under its saved id and execution count.
//
// # Errors
// An ErrInvalid when the id is empty or taken, or the language is not
// one of this sandbox's; ErrOverloaded when the sandbox has MaxContexts.
func (h *Handler) AddContext(ci ContextInfo) error {
	m := h.codes
	lang := normalizeLanguage(ci.Language)
	if ci.ID == "" || !m.supports(lang) {
		return fmt.Errorf("%w: code context %q (%s) cannot be added", errdefs.ErrInvalid, ci.ID, ci.Language)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.contexts[ci.ID]; ok {
		return fmt.Errorf("%w: code context %q exists", errdefs.ErrInvalid, ci.ID)
	}
	if len(m.contexts) >= m.h.opts.MaxContexts {
		return fmt.Errorf("%w: this sandbox already has %d code contexts", ErrOverloaded, len(m.contexts))
	}
	m.contexts[ci.ID] = &codeContext{id: ci.ID, language: lang, cwd: ci.Cwd, count: ci.Count, interp: ci.Interp}
	if ci.Default {
		m.defaults[lang] = ci.ID
	}
	return nil
}
