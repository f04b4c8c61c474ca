// Package runtimes declares what a sandbox backend provides (the Runtime
// and Sandbox interfaces), the shared sentinel errors, and the Selector that
// picks a backend for a create request.
package runtimes

import (
	"context"
	"io"
	"net/http"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// Sentinel errors: the kinds of hybox's one error model (errdefs), under
// the names backends use. Backends wrap them with context; errdefs.HTTP
// maps them to statuses in one place.
var (
	// ErrNotFound: no such sandbox (or image).
	ErrNotFound = errdefs.ErrNotFound
	// ErrInvalid: the request cannot be served as given (400).
	ErrInvalid = errdefs.ErrInvalid
	// ErrNotSupported: this backend cannot do it; the message names one that can.
	ErrNotSupported = errdefs.ErrNotSupported
	// ErrUnavailable: the backend is not ready (guests missing, daemon down).
	ErrUnavailable = errdefs.ErrUnavailable
	// ErrPaused: the sandbox is paused; execd answers only /ping until it
	// is resumed (409 SANDBOX_PAUSED).
	ErrPaused = errdefs.New(api.ErrorCodeSANDBOXPAUSED, "the sandbox is paused; resume it first")
)

// Spec is everything a backend needs to create or restore a sandbox.
type Spec struct {
	ID          string
	Image       string
	Entrypoint  []string
	Env         map[string]string
	MemoryBytes int64 // 0 = backend default
	CPUMillis   int64 // 0 = unlimited
	Extensions  map[string]string
	// Volumes are host directories mounted into the sandbox; backends
	// refuse paths outside their allow-list.
	Volumes []Volume
	// ImageAuth are registry credentials for pulling Image (never stored).
	ImageAuth *RegistryAuth
	// Dir is the sandbox's own host directory (created by the server); a
	// backend keeps all of its per-sandbox state below it.
	Dir string
	// Egress governs the sandbox's outbound traffic (policy and vault).
	// Nil means the sandbox has no outbound network at all.
	Egress Egress
}

// Egress is the server's per-sandbox egress controller, as a backend sees
// it: the one policy and vault, applied the way the backend needs.
type Egress interface {
	// Do performs an outbound HTTP request on behalf of a guest that has no
	// network of its own (wasm). The policy decides and the vault injects;
	// a denied request fails with an error that names the rule.
	Do(req *http.Request) (*http.Response, error)
	// Enforce installs the policy in the network namespace at nsPath (a
	// container's). A backend calls it after the namespace is attached and
	// before the workload starts, and again when it restores the sandbox
	// after a server restart.
	Enforce(ctx context.Context, nsPath string) error
	// Files are files a container sandbox gets, by absolute path inside it
	// (its resolv.conf, a trust store holding the sandbox's CA).
	Files() map[string][]byte
	// Env is environment a container sandbox's processes get (CA bundle
	// variables for common tools).
	Env() map[string]string
}

// Sandbox is a live sandbox.
type Sandbox interface {
	// Execd is the sandbox's execd API (PROTOCOL.md section 3).
	Execd() http.Handler
	// Proxy returns a reverse proxy to port inside the sandbox.
	//
	// # Errors
	// ErrNotSupported when the sandbox has no network (wasm).
	Proxy(port int) (http.Handler, error)
	// Pause stops the sandbox from running anything until Resume; its
	// state is kept.
	Pause(ctx context.Context) error
	// Resume undoes Pause.
	Resume(ctx context.Context) error
	// Close releases the sandbox's in-memory resources. Files stay: Destroy
	// removes them.
	Close(ctx context.Context) error
}

// CodeRunner is implemented by sandboxes that run code for the server
// without a request to their execd API from outside: the one-shot run
// (POST /run) calls it directly.
type CodeRunner interface {
	// RunCode runs req as POST /code does and sends its events to sink.
	//
	// # Errors
	// What POST /code answers before its stream starts (no code, context
	// not found, busy, unknown language), with its wire code; ErrPaused
	// while the sandbox is paused.
	RunCode(ctx context.Context, req api.CodeRunRequest, sink execd.Sink) error
}

// Runtime is one backend.
type Runtime interface {
	// Name is the value of extensions["hybox.io/runtime"] that selects it.
	Name() string
	// Validate checks that spec can be served, before anything is created.
	//
	// # Errors
	// ErrInvalid or ErrNotSupported, with a message for the user.
	Validate(spec Spec) error
	// Create makes a new sandbox and returns it ready to serve execd.
	Create(ctx context.Context, spec Spec) (Sandbox, error)
	// Restore re-attaches a sandbox that existed before a server restart.
	//
	// # Errors
	// ErrNotFound when its state is gone.
	Restore(ctx context.Context, spec Spec) (Sandbox, error)
	// Destroy removes every trace of the sandbox. It succeeds when there is
	// nothing left to remove.
	Destroy(ctx context.Context, spec Spec) error
}

// Forker is implemented by runtimes that can copy a live sandbox (the
// wasm tier today; containers answer NOT_SUPPORTED until they do).
type Forker interface {
	// Fork makes a new sandbox, described by spec (its own ID and Dir;
	// the rest copied from src's), holding a copy of src's workspace and
	// of the state of every code context of src (ids, execution counts,
	// interpreter memory). src keeps running and keeps its state; running
	// executions are waited for.
	//
	// # Errors
	// ErrNotSupported when src cannot be copied; ErrInvalid when src is
	// not a sandbox of this runtime.
	Fork(ctx context.Context, src Sandbox, spec Spec) (Sandbox, error)
}

// Volume mounts HostPath (a host directory, or SubPath below it) at
// MountPath inside the sandbox.
type Volume struct {
	Name      string `json:"name"`
	HostPath  string `json:"hostPath"`
	SubPath   string `json:"subPath,omitempty"`
	MountPath string `json:"mountPath"`
	ReadOnly  bool   `json:"readOnly,omitempty"`
	// Managed marks a named volume: HostPath is a directory the server
	// manages (not subject to the allowed host paths), and a missing
	// SubPath below it is created.
	Managed bool `json:"managed,omitempty"`
	// Claim is the named volume's name (pvc.claimName) when Managed.
	Claim string `json:"claim,omitempty"`
	// CreateClaim (pvc.createIfNotExists, default true), DeleteClaim
	// (pvc.deleteOnSandboxTermination) and Storage (pvc.storage) are for
	// runtimes that own their claims (ClaimOwner); the server's own named
	// volumes are kept by the server.
	CreateClaim bool   `json:"createClaim,omitempty"`
	DeleteClaim bool   `json:"deleteClaim,omitempty"`
	Storage     string `json:"storage,omitempty"`
}

// ClaimOwner is implemented by runtimes whose named (pvc) volumes are the
// platform's own, such as Kubernetes PersistentVolumeClaims, rather than
// directories the server manages: the server then keeps no record of
// them, and the runtime finds, makes (Volume.CreateClaim) and removes
// (Volume.DeleteClaim) them.
type ClaimOwner interface {
	// OwnsClaims reports whether the runtime owns its named volumes.
	OwnsClaims() bool
}

// ExitStatus says how a sandbox ended on its own. A user program's exit is
// data, not an error.
type ExitStatus struct {
	Code   int    // exit code of the sandbox's main process (137 when killed)
	Reason string // "Exited", "OOMKilled" or "Killed"
}

// Exiter is implemented by sandboxes that can end on their own (a
// container whose init died or was OOM-killed). The channel yields once.
type Exiter interface {
	Exited() <-chan ExitStatus
}

// Sweeper is implemented by runtimes that can find sandboxes the server
// has no record of (a crash during create) and remove them.
type Sweeper interface {
	// Sweep removes every sandbox of the runtime whose id keep rejects.
	Sweep(ctx context.Context, keep func(id string) bool) error
}

// ReplicaSweeper is implemented by runtimes whose sandboxes several server
// replicas share (the Kubernetes backend): their sandboxes name the
// replica that made them, so that the leading replica can remove what a
// replica that died left half-made (a create in flight, its pool members)
// without touching what a living one is making.
type ReplicaSweeper interface {
	// SweepReplicas removes every sandbox of the runtime whose id and maker
	// keep rejects (maker is "" for sandboxes that name none).
	SweepReplicas(ctx context.Context, keep func(id, maker string) bool) error
}

// Image is an image known to a backend (the wire type Image).
type Image = api.Image

// RegistryAuth holds credentials for pulling an image.
type RegistryAuth struct {
	Username string
	Password string
}

// ImageStore manages the images of container sandboxes.
type ImageStore interface {
	// Import reads an OCI or docker image archive and unpacks its images.
	Import(ctx context.Context, archive io.Reader) ([]Image, error)
	// List lists the images.
	List(ctx context.Context) ([]Image, error)
	// Get returns the image ref names (a short name such as python:3
	// matches its full reference); ErrNotFound when it is not present.
	Get(ctx context.Context, ref string) (Image, error)
	// Remove deletes an image; ErrNotFound when it does not exist.
	Remove(ctx context.Context, name string) error
	// Pull fetches ref from its registry and unpacks it.
	Pull(ctx context.Context, ref string, auth *RegistryAuth) (Image, error)
}

// ExtensionRuntime is the extensions key that selects a runtime.
const ExtensionRuntime = "hybox.io/runtime"

// Pooler is implemented by runtimes that can start sandboxes before a
// create asks for them (warm pools) and personalise one when a create
// claims it. A pool member has the id the claimed sandbox will have.
type Pooler interface {
	// Warm starts a pool member for spec: image, resource limits and the
	// egress files (spec.Egress.Files; nothing is enforced yet) as a
	// create would, no entrypoint, no user environment; running, its
	// network attached and execd answering on the server's side only.
	Warm(ctx context.Context, spec Spec) (Sandbox, error)
	// Claim personalises member (made by Warm or RestoreWarm) for spec,
	// which has the member's id: the egress policy enforced, limits set,
	// environment, egress files and entrypoint given. The first step
	// reserves the member, so after any error, or a crash of the server
	// during Claim, the member is not reusable: destroy it.
	Claim(ctx context.Context, member Sandbox, spec Spec) error
	// UpdatesLimits reports whether Claim can give a member other resource
	// limits than it started with (runc can; gVisor keeps the limits it
	// booted with in its own view, so its pools serve only their own).
	UpdatesLimits() bool
	// RestoreWarm re-attaches a pool member after a server restart.
	//
	// # Errors
	// When it is gone or a claim had begun (destroy it).
	RestoreWarm(ctx context.Context, spec Spec) (Sandbox, error)
}
