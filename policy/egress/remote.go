package egress

import (
	"context"
	"errors"
	"time"

	"github.com/hybox-dev/hybox/policy"
	"github.com/hybox-dev/hybox/vault"
	"github.com/hybox-dev/hybox/vault/tproxy"
)

// State is what enforces a sandbox's egress: its policy (nil:
// unrestricted), and its vault and CA (nil without a credential proxy).
type State struct {
	Policy *policy.Policy
	Vault  *vault.Vault
	CA     *tproxy.CA
}

// Remote enforces a controller's state in another process, typically an
// Agent in the sandbox's own network namespace (AgentClient).
type Remote interface {
	// Push makes st the enforced state and returns once it is in force.
	Push(ctx context.Context, st State) error
}

// remoteTimeout bounds one push.
const remoteTimeout = 15 * time.Second

// State returns the controller's current state.
func (s *Controller) State() State {
	var p *policy.Policy
	if c := s.Policy(); c != nil {
		cp := c.Policy()
		p = &cp
	}
	return State{Policy: p, Vault: s.vault, CA: s.ca}
}

// Attach makes r enforce the controller's state: the current state is
// pushed at once, and from then on every change (SetPolicy, the egress
// API's vault changes) is pushed before it returns; a change r refuses is
// not made. The controller itself then installs nothing and resolves
// nothing (Enforce is for namespaces this process can enter). Attaching
// again replaces r (a restore after a server restart re-pushes).
//
// # Errors
// What r.Push returns; r is attached nevertheless, so a later change
// pushes again.
func (s *Controller) Attach(ctx context.Context, r Remote) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("egress controller is closed")
	}
	s.remote = r
	s.remoted.Store(true)
	st := s.State()
	return r.Push(ctx, st)
}

// pushLocked pushes a state with policy p and vault v to the attached
// remote. s.mu is held.
func (s *Controller) pushLocked(p *policy.Policy, v *vault.Vault) error {
	ctx, cancel := context.WithTimeout(s.ctx, remoteTimeout)
	defer cancel()
	return s.remote.Push(ctx, State{Policy: p, Vault: v, CA: s.ca})
}

// vaultChanged pushes the vault after the egress API changed it, when the
// controller is attached to a remote.
func (s *Controller) vaultChanged() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.remote == nil {
		return nil
	}
	var p *policy.Policy
	if c := s.Policy(); c != nil {
		cp := c.Policy()
		p = &cp
	}
	return s.pushLocked(p, s.vault)
}
