package execd

// A pooled container sandbox is started before anyone asks for it: its
// hybox-execd runs with --pooled, serves only its unix socket, and starts
// no entrypoint. When a create claims it, the server personalises it over
// that socket in two steps: ClaimBeginPath reserves it (so that a server
// that dies mid-claim finds it reserved and destroys it instead of handing
// it out again), then ClaimPath gives it its environment, files and
// entrypoint. These routes exist only on the unix socket, which only the
// server reaches, or, for a daemon with no unix socket (a Kubernetes
// Pod's), on TCP behind the daemon's access token; the server's execd
// proxy refuses ClaimPrefix.
const (
	ClaimPrefix    = "/hybox/"
	ClaimPath      = "/hybox/claim"
	ClaimBeginPath = "/hybox/claim/begin"
)

// AccessTokenHeader carries a daemon's access token (Options.AccessToken),
// which a daemon that is claimed over TCP requires on the claim routes too.
const AccessTokenHeader = "X-EXECD-ACCESS-TOKEN"

// Claim states (ClaimStatus.State).
const (
	ClaimIdle     = "idle"     // pooled, not claimed
	ClaimClaiming = "claiming" // reserved by ClaimBeginPath
	ClaimClaimed  = "claimed"  // personalised, or never pooled
)

// ClaimRequest personalises a pooled sandbox (POST ClaimPath).
type ClaimRequest struct {
	// Env is added to the daemon's environment for every process it starts
	// from now on, and the entrypoint's.
	Env map[string]string `json:"env,omitempty"`
	// Entrypoint is started once the rest is in place (none = none).
	Entrypoint []string `json:"entrypoint,omitempty"`
	// Files are written before the entrypoint starts (parents made 0755).
	Files []ClaimFile `json:"files,omitempty"`
}

// ClaimFile is one file a claim writes inside the sandbox.
type ClaimFile struct {
	Path string `json:"path"` // absolute
	Data []byte `json:"data"`
	Mode uint32 `json:"mode,omitempty"` // permission bits; 0 = 0644
}

// ClaimStatus answers GET ClaimPath.
type ClaimStatus struct {
	State string `json:"state"`
}
