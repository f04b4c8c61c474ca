package main

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/hybox-dev/hybox/execd"
	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// claimer is a pooled sandbox's claim state machine: idle → claiming
// (reserved) → claimed, each step once.
type claimer struct {
	mu          sync.Mutex
	state       string
	personalise func(execd.ClaimRequest) error
	// token, when set, is required on the claim routes too (claims over
	// TCP; the unix socket is the server's alone).
	token string
}

// maxClaimBytes bounds a claim request (it carries the sandbox's CA bundle).
const maxClaimBytes = 8 << 20

// routes serves the claim routes in front of the execd API (unix socket only).
func (c *claimer) routes(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, execd.ClaimPrefix) {
			next.ServeHTTP(w, r)
			return
		}
		if c.token != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get(execd.AccessTokenHeader)), []byte(c.token)) != 1 {
			errdefs.Write(w, errdefs.New(api.ErrorCodeUNAUTHORIZED, "missing or invalid %s", execd.AccessTokenHeader))
			return
		}
		switch {
		case r.URL.Path == execd.ClaimPath && r.Method == http.MethodGet:
			c.mu.Lock()
			st := execd.ClaimStatus{State: c.state}
			c.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(st)
		case r.URL.Path == execd.ClaimBeginPath && r.Method == http.MethodPost:
			if err := c.step(execd.ClaimIdle, execd.ClaimClaiming); err != nil {
				errdefs.Write(w, err)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		case r.URL.Path == execd.ClaimPath && r.Method == http.MethodPost:
			var req execd.ClaimRequest
			if err := json.NewDecoder(io.LimitReader(r.Body, maxClaimBytes)).Decode(&req); err != nil {
				errdefs.Write(w, errdefs.New(api.ErrorCodeINVALIDREQUEST, "claim: %s", errdefs.DescribeJSON(err)))
				return
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.state != execd.ClaimClaiming {
				errdefs.Write(w, errdefs.New(api.ErrorCodeCONFLICT, "claim: this sandbox is %s, not reserved (POST %s first)", c.state, execd.ClaimBeginPath))
				return
			}
			if err := c.personalise(req); err != nil {
				errdefs.Write(w, fmt.Errorf("%w: claim: %v", errdefs.ErrInternal, err))
				return
			}
			c.state = execd.ClaimClaimed
			w.WriteHeader(http.StatusNoContent)
		default:
			errdefs.Write(w, errdefs.New(api.ErrorCodeNOTFOUND, "no route %s %s", r.Method, r.URL.Path))
		}
	})
}

// step moves the state from → to, or says why it cannot.
func (c *claimer) step(from, to string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != from {
		return errdefs.New(api.ErrorCodeCONFLICT, "claim: this sandbox is %s, not %s", c.state, from)
	}
	c.state = to
	return nil
}

// writeClaimFile writes one file of a claim.
func writeClaimFile(f execd.ClaimFile) error {
	if !filepath.IsAbs(f.Path) || filepath.Clean(f.Path) != f.Path {
		return fmt.Errorf("claim file %q: not a clean absolute path", f.Path)
	}
	mode := os.FileMode(f.Mode).Perm()
	if mode == 0 {
		mode = 0o644
	}
	if err := os.MkdirAll(filepath.Dir(f.Path), 0o755); err != nil {
		return err
	}
	// Replace rather than write through: the image's file may be a
	// symlink into a shared place, or read-only.
	tmp := f.Path + ".hybox-claim"
	if err := os.WriteFile(tmp, f.Data, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return errors.Join(err, os.Remove(tmp))
	}
	if err := os.Rename(tmp, f.Path); err != nil {
		return errors.Join(err, os.Remove(tmp))
	}
	return nil
}

// mergeEnv returns base with the variables of extra set (replacing any
// of the same name), extra in name order.
func mergeEnv(base []string, extra map[string]string) []string {
	out := make([]string, 0, len(base)+len(extra))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := extra[k]; !ok {
			out = append(out, kv)
		}
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, k+"="+extra[k])
	}
	return out
}
