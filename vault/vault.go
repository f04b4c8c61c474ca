package vault

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
)

// Vault is the credential vault of one sandbox. The zero value and New()
// are an empty vault (not created: Get answers ErrNotFound, nothing
// matches). It is safe for concurrent use: readers (Match, Inject,
// Intercepts, Get) work on an immutable snapshot without locking; writers
// are serialized. Formatting a *Vault never shows a value.
type Vault struct {
	mu   sync.Mutex // serializes writers
	snap atomic.Pointer[snapshot]
}

// snapshot is one immutable revision of the vault.
type snapshot struct {
	revision int64
	creds    []*credential // in creation order
	byName   map[string]*credential
	bindings []*compiled // in creation order
}

type credential struct {
	name       string
	sourceType string
	value      Secret
	revision   int64
}

// New returns an empty vault.
func New() *Vault { return &Vault{} }

// Replace makes v's content from's current content (snapshots are
// immutable, so the two share it until either changes). Readers of v see
// the old content or the new one, never a mix.
func (v *Vault) Replace(from *Vault) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.snap.Store(from.snap.Load())
}

// String describes the vault without its values, e.g.
// "vault(revision 3, 2 credentials, 1 binding)".
func (v *Vault) String() string {
	s := v.snap.Load()
	if s == nil {
		return "vault(not created)"
	}
	return "vault(revision " + strconv.FormatInt(s.revision, 10) + ", " +
		strconv.Itoa(len(s.creds)) + " credentials, " + strconv.Itoa(len(s.bindings)) + " bindings)"
}

// Format writes String for every verb, so %+v and %#v show no value either.
func (v *Vault) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(v.String())) }

// Create creates the vault from req, replacing any existing content. Every
// credential and binding is validated (see the package notes); each
// binding host must be accepted by hostAllowed, which receives the
// normalized pattern ("api.example.com", "*.example.com", "10.0.0.1") and
// returns nil to allow it. A nil hostAllowed refuses every binding (a vault
// needs a network policy). The new revision is 1, or the previous revision
// plus one when a vault existed.
//
// # Errors
//
// A *InvalidError (matching ErrInvalid) naming the offending field.
func (v *Vault) Create(req CreateRequest, hostAllowed func(host string) error) (State, error) {
	if len(req.Credentials) > MaxCredentials {
		return State{}, invalid("credentials", "more than "+strconv.Itoa(MaxCredentials)+" credentials")
	}
	if len(req.Bindings) > MaxBindings {
		return State{}, invalid("bindings", "more than "+strconv.Itoa(MaxBindings)+" bindings")
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	rev := int64(1)
	if old := v.snap.Load(); old != nil {
		rev = old.revision + 1
	}
	next := &snapshot{revision: rev, byName: map[string]*credential{}}
	for i, c := range req.Credentials {
		f := idx("credentials", i)
		n, err := normCredential(f, c)
		if err != nil {
			return State{}, err
		}
		if next.byName[n.Name] != nil {
			return State{}, invalidValue(f+".name", n.Name, "duplicate credential name")
		}
		cr := &credential{name: n.Name, sourceType: n.Source.Type, value: n.Source.Value, revision: rev}
		next.creds = append(next.creds, cr)
		next.byName[cr.name] = cr
	}
	for i, b := range req.Bindings {
		f := idx("bindings", i)
		cb, err := buildBinding(f, b, rev, hostAllowed)
		if err != nil {
			return State{}, err
		}
		if next.binding(cb.b.Name) != nil {
			return State{}, invalidValue(f+".name", b.Name, "duplicate binding name")
		}
		next.bindings = append(next.bindings, cb)
	}
	if err := next.checkRefs(); err != nil {
		return State{}, err
	}
	v.snap.Store(next)
	return next.state(), nil
}

// buildBinding normalizes and compiles a binding and checks its hosts
// against the network policy.
func buildBinding(field string, b Binding, rev int64, hostAllowed func(string) error) (*compiled, error) {
	n, err := normBinding(field, b)
	if err != nil {
		return nil, err
	}
	for i, h := range n.Match.Hosts {
		var err error
		if hostAllowed == nil {
			err = fmt.Errorf("no network policy is set")
		} else {
			err = hostAllowed(h)
		}
		if err != nil {
			return nil, &InvalidError{Field: idx(field+".match.hosts", i), Value: h,
				Reason: "not allowed by the network policy", Err: err}
		}
	}
	return compile(n, rev), nil
}

// checkRefs verifies that every credential a binding names exists.
func (s *snapshot) checkRefs() error {
	for i, cb := range s.bindings {
		fields, names := credentialRefs(idx("bindings", i)+".auth", cb.b.Auth)
		for j, n := range names {
			if s.byName[n] == nil {
				return invalidValue(fields[j], n, "no such credential")
			}
		}
	}
	return nil
}

func (s *snapshot) binding(name string) *compiled {
	for _, cb := range s.bindings {
		if cb.b.Name == name {
			return cb
		}
	}
	return nil
}

func (s *snapshot) state() State {
	st := State{Revision: s.revision, Credentials: make([]CredentialInfo, 0, len(s.creds)),
		Bindings: make([]BindingInfo, 0, len(s.bindings))}
	for _, c := range s.creds {
		st.Credentials = append(st.Credentials, c.info())
	}
	for _, b := range s.bindings {
		st.Bindings = append(st.Bindings, b.info())
	}
	return st
}

func (c *credential) info() CredentialInfo {
	return CredentialInfo{Name: c.name, SourceType: c.sourceType, Revision: c.revision}
}

func (cb *compiled) info() BindingInfo {
	m := cloneMatch(cb.b.Match)
	return BindingInfo{Name: cb.b.Name, Revision: cb.revision, Match: &m,
		Auth: &AuthInfo{Type: string(cb.b.Auth.Type), Name: cb.b.Auth.Name}}
}

func cloneMatch(m Match) Match {
	return Match{Schemes: slices.Clone(m.Schemes), Ports: slices.Clone(m.Ports), Hosts: slices.Clone(m.Hosts),
		Methods: slices.Clone(m.Methods), Paths: slices.Clone(m.Paths)}
}

func cloneBinding(b Binding) Binding {
	a := b.Auth
	a.Headers = slices.Clone(a.Headers)
	a.Substitutions = slices.Clone(a.Substitutions)
	for i := range a.Substitutions {
		a.Substitutions[i].In = slices.Clone(a.Substitutions[i].In)
	}
	return Binding{Name: b.Name, Match: cloneMatch(b.Match), Auth: a}
}

// Get returns the sanitized state.
//
// # Errors
//
// ErrNotFound when no vault was created.
func (v *Vault) Get() (State, error) {
	s := v.snap.Load()
	if s == nil {
		return State{}, fmt.Errorf("credential vault was not created: %w", ErrNotFound)
	}
	return s.state(), nil
}

// Patch applies req atomically: either every mutation applies and the
// revision rises by one, or nothing changes. Within each of credentials and
// bindings, deletes apply first, then replaces, then adds; a name may appear
// in only one of the three lists. Deleting a credential a remaining binding
// uses is refused. Only added and replaced bindings are checked against
// hostAllowed. A replaced or added item takes the new revision.
//
// # Errors
//
// ErrNotFound when no vault exists; ErrRevisionConflict when
// ExpectedRevision is set and differs; a *InvalidError (ErrInvalid)
// otherwise, e.g. adding a name that exists or replacing one that does not.
func (v *Vault) Patch(req PatchRequest, hostAllowed func(string) error) (State, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	old := v.snap.Load()
	if old == nil {
		return State{}, fmt.Errorf("credential vault was not created: %w", ErrNotFound)
	}
	if req.ExpectedRevision != nil && *req.ExpectedRevision != old.revision {
		return State{}, fmt.Errorf("expectedRevision %d, current revision %d: %w",
			*req.ExpectedRevision, old.revision, ErrRevisionConflict)
	}
	rev := old.revision + 1
	next := &snapshot{revision: rev, byName: map[string]*credential{},
		creds: slices.Clone(old.creds), bindings: slices.Clone(old.bindings)}

	var cm CredentialMutations
	if req.Credentials != nil {
		cm = *req.Credentials
	}
	if err := checkDisjoint("credentials", cm.Add, cm.Replace, cm.Delete, func(c Credential) string { return c.Name }); err != nil {
		return State{}, err
	}
	for i, name := range cm.Delete {
		j := slices.IndexFunc(next.creds, func(c *credential) bool { return c.name == name })
		if j < 0 {
			return State{}, &InvalidError{Field: idx("credentials.delete", i), Value: name, Reason: "no such credential"}
		}
		next.creds = slices.Delete(next.creds, j, j+1)
	}
	for i, c := range cm.Replace {
		f := idx("credentials.replace", i)
		n, err := normCredential(f, c)
		if err != nil {
			return State{}, err
		}
		j := slices.IndexFunc(next.creds, func(c *credential) bool { return c.name == n.Name })
		if j < 0 {
			return State{}, invalidValue(f+".name", n.Name, "no such credential (use add)")
		}
		next.creds[j] = &credential{name: n.Name, sourceType: n.Source.Type, value: n.Source.Value, revision: rev}
	}
	for i, c := range cm.Add {
		f := idx("credentials.add", i)
		n, err := normCredential(f, c)
		if err != nil {
			return State{}, err
		}
		if slices.ContainsFunc(next.creds, func(c *credential) bool { return c.name == n.Name }) {
			return State{}, invalidValue(f+".name", n.Name, "credential exists (use replace)")
		}
		next.creds = append(next.creds, &credential{name: n.Name, sourceType: n.Source.Type, value: n.Source.Value, revision: rev})
	}
	if len(next.creds) > MaxCredentials {
		return State{}, invalid("credentials", "more than "+strconv.Itoa(MaxCredentials)+" credentials")
	}
	for _, c := range next.creds {
		next.byName[c.name] = c
	}

	var bm BindingMutations
	if req.Bindings != nil {
		bm = *req.Bindings
	}
	if err := checkDisjoint("bindings", bm.Add, bm.Replace, bm.Delete, func(b Binding) string { return b.Name }); err != nil {
		return State{}, err
	}
	for i, name := range bm.Delete {
		j := slices.IndexFunc(next.bindings, func(c *compiled) bool { return c.b.Name == name })
		if j < 0 {
			return State{}, &InvalidError{Field: idx("bindings.delete", i), Value: name, Reason: "no such binding"}
		}
		next.bindings = slices.Delete(next.bindings, j, j+1)
	}
	for i, b := range bm.Replace {
		f := idx("bindings.replace", i)
		cb, err := buildBinding(f, b, rev, hostAllowed)
		if err != nil {
			return State{}, err
		}
		j := slices.IndexFunc(next.bindings, func(c *compiled) bool { return c.b.Name == cb.b.Name })
		if j < 0 {
			return State{}, invalidValue(f+".name", b.Name, "no such binding (use add)")
		}
		next.bindings[j] = cb
	}
	for i, b := range bm.Add {
		f := idx("bindings.add", i)
		cb, err := buildBinding(f, b, rev, hostAllowed)
		if err != nil {
			return State{}, err
		}
		if next.binding(cb.b.Name) != nil {
			return State{}, invalidValue(f+".name", b.Name, "binding exists (use replace)")
		}
		next.bindings = append(next.bindings, cb)
	}
	if len(next.bindings) > MaxBindings {
		return State{}, invalid("bindings", "more than "+strconv.Itoa(MaxBindings)+" bindings")
	}
	if err := next.checkRefs(); err != nil {
		return State{}, err
	}
	v.snap.Store(next)
	return next.state(), nil
}

// checkDisjoint refuses a name that appears twice across add, replace and
// delete.
func checkDisjoint[T any](field string, add, replace []T, del []string, name func(T) string) error {
	seen := map[string]string{}
	see := func(list string, i int, n string) error {
		f := idx(field+"."+list, i)
		if prev, ok := seen[n]; ok {
			return invalidValue(f, n, "also listed at "+prev)
		}
		seen[n] = f
		return nil
	}
	for i, n := range del {
		if err := see("delete", i, n); err != nil {
			return err
		}
	}
	for i, x := range replace {
		if err := see("replace", i, name(x)); err != nil {
			return err
		}
	}
	for i, x := range add {
		if err := see("add", i, name(x)); err != nil {
			return err
		}
	}
	return nil
}

// Delete removes the vault and every value in it.
//
// # Errors
//
// ErrNotFound when no vault exists.
func (v *Vault) Delete() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.snap.Load() == nil {
		return fmt.Errorf("credential vault was not created: %w", ErrNotFound)
	}
	v.snap.Store(nil)
	return nil
}

// Credentials lists the sanitized credentials.
//
// # Errors
//
// ErrNotFound when no vault exists.
func (v *Vault) Credentials() ([]CredentialInfo, error) {
	st, err := v.Get()
	return st.Credentials, err
}

// Credential returns the sanitized metadata of one credential.
//
// # Errors
//
// ErrNotFound when no vault exists or it has no such credential.
func (v *Vault) Credential(name string) (CredentialInfo, error) {
	s := v.snap.Load()
	if s == nil {
		return CredentialInfo{}, fmt.Errorf("credential vault was not created: %w", ErrNotFound)
	}
	c := s.byName[name]
	if c == nil {
		return CredentialInfo{}, fmt.Errorf("credential %q: %w", name, ErrNotFound)
	}
	return c.info(), nil
}

// Bindings lists the sanitized bindings (the wire metadata: no credential
// names).
//
// # Errors
//
// ErrNotFound when no vault exists.
func (v *Vault) Bindings() ([]BindingInfo, error) {
	st, err := v.Get()
	return st.Bindings, err
}

// Binding returns the sanitized metadata of one binding.
//
// # Errors
//
// ErrNotFound when no vault exists or it has no such binding.
func (v *Vault) Binding(name string) (BindingInfo, error) {
	s := v.snap.Load()
	if s == nil {
		return BindingInfo{}, fmt.Errorf("credential vault was not created: %w", ErrNotFound)
	}
	cb := s.binding(name)
	if cb == nil {
		return BindingInfo{}, fmt.Errorf("binding %q: %w", name, ErrNotFound)
	}
	return cb.info(), nil
}

// Rule returns the full binding (with the names of the credentials it
// uses, never their values).
//
// # Errors
//
// ErrNotFound when no vault exists or it has no such binding.
func (v *Vault) Rule(name string) (Binding, error) {
	s := v.snap.Load()
	if s == nil {
		return Binding{}, fmt.Errorf("credential vault was not created: %w", ErrNotFound)
	}
	cb := s.binding(name)
	if cb == nil {
		return Binding{}, fmt.Errorf("binding %q: %w", name, ErrNotFound)
	}
	return cloneBinding(cb.b), nil
}
