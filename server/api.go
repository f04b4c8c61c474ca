package server

import (
	"github.com/hybox-dev/hybox/sdks/go/api"
)

// Sandbox states (the SandboxState schema), as the record stores them.
const (
	StatePending    = string(api.SandboxStatePending)
	StateRunning    = string(api.SandboxStateRunning)
	StatePausing    = string(api.SandboxStatePausing)
	StatePaused     = string(api.SandboxStatePaused)
	StateResuming   = string(api.SandboxStateResuming)
	StateStopping   = string(api.SandboxStateStopping)
	StateTerminated = string(api.SandboxStateTerminated)
	StateFailed     = string(api.SandboxStateFailed)
)

var allStates = []string{StatePending, StateRunning, StatePausing, StatePaused, StateResuming, StateStopping, StateTerminated, StateFailed}

// wire is the record as the lifecycle API shows it.
func (r *Record) wire() api.Sandbox {
	s := api.Sandbox{
		ID:    r.ID,
		Image: api.ImageSpec{URI: r.Image},
		Status: api.SandboxStatus{State: api.SandboxState(r.State), Reason: r.Reason, Message: r.Message,
			LastTransitionAt: r.LastTransitionAt},
		Metadata:   r.Metadata,
		Entrypoint: r.Entrypoint,
		CreatedAt:  r.CreatedAt,
		Extensions: runtimeExtensions(r.Extensions, r.Runtime),
	}
	if r.Platform != nil {
		s.Platform = *r.Platform
	}
	if r.ExpiresAt != nil {
		s.ExpiresAt = *r.ExpiresAt
	}
	if s.Metadata == nil {
		s.Metadata = api.Metadata{}
	}
	if s.Entrypoint == nil {
		s.Entrypoint = []string{}
	}
	return s
}
