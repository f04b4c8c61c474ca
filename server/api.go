package server

import (
	"encoding/json"
	"time"
)

// Wire types of the lifecycle API (PROTOCOL.md section 2).

// ImageSpec is {"uri", "auth"}.
type ImageSpec struct {
	URI  string     `json:"uri"`
	Auth *ImageAuth `json:"auth,omitempty"`
}

// ImageAuth holds registry credentials. It never appears in responses.
type ImageAuth struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// CreateSandboxRequest is the body of POST /sandboxes.
type CreateSandboxRequest struct {
	Image           *ImageSpec        `json:"image"`
	SnapshotID      string            `json:"snapshotId"`
	Entrypoint      []string          `json:"entrypoint"`
	Timeout         *float64          `json:"timeout"`
	ResourceLimits  map[string]string `json:"resourceLimits"`
	Env             map[string]string `json:"env"`
	Metadata        map[string]string `json:"metadata"`
	Platform        *Platform         `json:"platform"`
	NetworkPolicy   json.RawMessage   `json:"networkPolicy"`
	CredentialProxy json.RawMessage   `json:"credentialProxy"`
	SecureAccess    *bool             `json:"secureAccess"`
	Volumes         []VolumeSpec      `json:"volumes"`
	Extensions      map[string]string `json:"extensions"`
}

// VolumeSpec is one entry of CreateSandboxRequest.volumes.
type VolumeSpec struct {
	Name      string `json:"name"`
	MountPath string `json:"mountPath"`
	ReadOnly  bool   `json:"readOnly"`
	SubPath   string `json:"subPath"`
	Host      *struct {
		Path string `json:"path"`
	} `json:"host"`
	PVC json.RawMessage `json:"pvc"`
}

// Status is a sandbox's state.
type Status struct {
	State            string    `json:"state"`
	Reason           string    `json:"reason,omitempty"`
	Message          string    `json:"message,omitempty"`
	LastTransitionAt time.Time `json:"lastTransitionAt"`
}

// Sandbox is the wire form of a sandbox.
type Sandbox struct {
	ID         string            `json:"id"`
	Image      ImageSpec         `json:"image"`
	SnapshotID *string           `json:"snapshotId,omitempty"`
	Platform   *Platform         `json:"platform,omitempty"`
	Status     Status            `json:"status"`
	Metadata   map[string]string `json:"metadata"`
	Entrypoint []string          `json:"entrypoint"`
	ExpiresAt  *time.Time        `json:"expiresAt,omitempty"`
	CreatedAt  time.Time         `json:"createdAt"`
	Extensions map[string]string `json:"extensions,omitempty"`
}

// Pagination is the page info of a list.
type Pagination struct {
	Page        int  `json:"page"`
	PageSize    int  `json:"pageSize"`
	TotalItems  int  `json:"totalItems"`
	TotalPages  int  `json:"totalPages"`
	HasNextPage bool `json:"hasNextPage"`
}

// ListSandboxesResponse is the body of GET /sandboxes.
type ListSandboxesResponse struct {
	Items      []Sandbox  `json:"items"`
	Pagination Pagination `json:"pagination"`
}

// Endpoint is the body of GET /sandboxes/{id}/endpoints/{port}.
type Endpoint struct {
	Endpoint string            `json:"endpoint"`
	Headers  map[string]string `json:"headers"`
}

// Sandbox states.
const (
	StatePending    = "Pending"
	StateRunning    = "Running"
	StatePausing    = "Pausing"
	StatePaused     = "Paused"
	StateResuming   = "Resuming"
	StateStopping   = "Stopping"
	StateTerminated = "Terminated"
	StateFailed     = "Failed"
)

var allStates = []string{StatePending, StateRunning, StatePausing, StatePaused, StateResuming, StateStopping, StateTerminated, StateFailed}

func (r *Record) wire() Sandbox {
	s := Sandbox{
		ID:         r.ID,
		Image:      ImageSpec{URI: r.Image},
		Platform:   r.Platform,
		Status:     Status{State: r.State, Reason: r.Reason, Message: r.Message, LastTransitionAt: r.LastTransitionAt},
		Metadata:   r.Metadata,
		Entrypoint: r.Entrypoint,
		ExpiresAt:  r.ExpiresAt,
		CreatedAt:  r.CreatedAt,
		Extensions: runtimeExtensions(r.Extensions, r.Runtime),
	}
	if s.Metadata == nil {
		s.Metadata = map[string]string{}
	}
	if s.Entrypoint == nil {
		s.Entrypoint = []string{}
	}
	return s
}
