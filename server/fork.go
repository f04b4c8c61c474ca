package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/hybox-dev/hybox/internal/cleanup"
	"github.com/hybox-dev/hybox/internal/mounts"
	"github.com/hybox-dev/hybox/policy/egress"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// maxForks caps ForkSandboxRequest.count.
const maxForks = 16

// forkRequest is api.ForkSandboxRequest with count's absence visible (and
// 2.0 read as the integer JSON Schema takes it for).
type forkRequest struct {
	Count    *float64     `json:"count"`
	Metadata api.Metadata `json:"metadata"`
}

// forkSandbox copies a sandbox (POST /sandboxes/{id}/fork) through its
// runtime's runtimes.Forker. Either every copy is made, or none is left.
func (s *Server) forkSandbox(c *gin.Context) {
	var req forkRequest
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, maxBodyBytes))
	if err != nil {
		s.abortErr(c, errdefs.New(api.ErrorCodePAYLOADTOOLARGE, "request body exceeds %d bytes", maxBodyBytes))
		return
	}
	if len(bytes.TrimSpace(body)) > 0 {
		c.Request.Body = io.NopCloser(bytes.NewReader(body))
		if err := decodeBody(c, &req); err != nil {
			s.abortErr(c, err)
			return
		}
	}
	n := 1
	if req.Count != nil {
		if f := *req.Count; f != math.Trunc(f) || f < 1 || f > maxForks {
			s.abortErr(c, badRequest("count must be an integer between 1 and 16"))
			return
		}
		n = int(*req.Count)
	}
	if err := validateMetadata(req.Metadata); err != nil {
		s.abortErr(c, err)
		return
	}
	unlock := s.lock(c.Param("id"))
	defer unlock()
	src, ok := s.getRecord(c)
	if !ok {
		return
	}
	rt, ok := s.opts.Runtimes.Get(src.Runtime)
	forker, can := rt.(runtimes.Forker)
	if !ok || !can {
		s.abortErr(c, errdefs.New(api.ErrorCodeNOTSUPPORTED,
			"sandbox %s runs on %s, which cannot fork yet; only wasm sandboxes can (create one with extensions {\"hybox.io/runtime\":\"wasm\"})", src.ID, src.Runtime))
		return
	}
	if src.State != StateRunning && src.State != StatePaused {
		s.abortErr(c, errdefs.New(api.ErrorCodeINVALIDSTATE, "sandbox %s is %s; it must be Running or Paused", src.ID, src.State))
		return
	}
	sb, ok := s.liveSandbox(src.ID)
	if !ok {
		s.abortErr(c, errdefs.New(api.ErrorCodeUNAVAILABLE, "sandbox %s is not attached", src.ID))
		return
	}
	bg := context.WithoutCancel(c.Request.Context())
	cu := cleanup.Make(func() {})
	defer cu.Clean()
	type made struct {
		rec *Record
		sb  runtimes.Sandbox
		eg  *egress.Controller
	}
	var out []made
	for range n {
		rec := s.forkRecord(src, req.Metadata)
		cu.Add(func() {
			_ = mounts.RemoveAll(s.sandboxDir(rec.ID))
			_ = s.store.delete(rec)
		})
		eg, err := s.newEgress(rec, true)
		if err != nil {
			s.abortErr(c, err)
			return
		}
		cu.Add(func() { _ = eg.Close() })
		spec := s.spec(rec)
		spec.Egress = eg
		cu.Add(func() { _ = rt.Destroy(bg, s.spec(rec)) })
		fsb, err := forker.Fork(c.Request.Context(), sb, spec)
		if err != nil {
			s.log.Warn("fork sandbox", "id", src.ID, "err", err)
			s.abortErr(c, err)
			return
		}
		cu.Add(func() { _ = fsb.Close(bg) })
		if err := s.store.create(rec); err != nil {
			s.abortErr(c, err)
			return
		}
		out = append(out, made{rec, fsb, eg})
	}
	cu.Release()
	resp := api.ForkSandboxResponse{Sandboxes: []api.Sandbox{}}
	for _, m := range out {
		s.mu.Lock()
		s.egress[m.rec.ID] = m.eg
		s.mu.Unlock()
		s.attach(m.rec.ID, m.sb)
		resp.Sandboxes = append(resp.Sandboxes, m.rec.wire())
	}
	c.JSON(http.StatusAccepted, resp)
}

// forkRecord returns the record of a new copy of src: a new id and token,
// the same settings, src's metadata with md over it, src's timeout counted
// from now.
func (s *Server) forkRecord(src *Record, md api.Metadata) *Record {
	now := time.Now().UTC()
	rec := *src
	rec.ID, rec.Token, rec.CreatedAt = newID(), newToken(), now
	rec.State, rec.Reason, rec.Message, rec.LastTransitionAt = StateRunning, "", "", now
	rec.Metadata = maps.Clone(src.Metadata)
	if len(md) > 0 {
		if rec.Metadata == nil {
			rec.Metadata = map[string]string{}
		}
		maps.Copy(rec.Metadata, md)
	}
	rec.Env, rec.Extensions, rec.ResourceLimits = maps.Clone(src.Env), maps.Clone(src.Extensions), maps.Clone(src.ResourceLimits)
	// The copy mounts the same volumes and shares src's claims: a named
	// volume src's create made with deleteOnSandboxTermination goes when
	// the last of them is deleted.
	rec.Volumes, rec.Claims = slices.Clone(src.Volumes), slices.Clone(src.Claims)
	if src.ExpiresAt != nil {
		exp := now.Add(src.ExpiresAt.Sub(src.CreatedAt))
		rec.ExpiresAt = &exp
	}
	if src.NetworkPolicy != nil {
		if b, err := json.Marshal(src.NetworkPolicy); err == nil {
			rec.NetworkPolicy = nil
			_ = json.Unmarshal(b, &rec.NetworkPolicy)
		}
	}
	return &rec
}

// discard tells a sandbox that is about to be destroyed that its Close
// need not save anything (wasm sandboxes save their contexts at Close).
func discard(sb runtimes.Sandbox) {
	if d, ok := sb.(interface{ Discard() }); ok {
		d.Discard()
	}
}

// extensionIsolation is the extension that isolates code executions
// (wasm sandboxes only; runtimes/wasm.ExtensionIsolation).
const extensionIsolation = "hybox.io/isolation"

// checkIsolation refuses per-call isolation for a runtime that would
// silently not provide it.
func checkIsolation(rec *Record) error {
	if v := rec.Extensions[extensionIsolation]; v != "" && rec.Runtime != "wasm" {
		return errdefs.New(api.ErrorCodeNOTSUPPORTED,
			"extensions[%q] is available for wasm sandboxes only; this sandbox would run on %s (create it with extensions {\"hybox.io/runtime\":\"wasm\"})", extensionIsolation, rec.Runtime)
	}
	return nil
}
