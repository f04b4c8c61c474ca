package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/hybox-dev/hybox/internal/cleanup"
	"github.com/hybox-dev/hybox/internal/mounts"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// maxBodyBytes caps lifecycle request bodies.
const maxBodyBytes = 1 << 20

// reservedPrefix marks metadata keys that users may not set.
const reservedPrefix = "opensandbox.io/"

func decodeBody(c *gin.Context, v any) error {
	body := http.MaxBytesReader(c.Writer, c.Request.Body, maxBodyBytes)
	dec := json.NewDecoder(body)
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errdefs.New(api.ErrorCodePAYLOADTOOLARGE, "request body exceeds %d bytes", mbe.Limit)
		}
		return badRequest(errdefs.DescribeJSON(err))
	}
	if dec.More() {
		return badRequest("invalid JSON: trailing data after the object")
	}
	if string(raw) == "null" {
		return badRequest("the request body must be a JSON object, not null")
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return badRequest(errdefs.DescribeJSON(err))
	}
	return nil
}

func validateMetadata(md map[string]string) error {
	for k := range md {
		if k == "" {
			return badRequest("metadata keys must not be empty")
		}
		if strings.HasPrefix(k, reservedPrefix) {
			return badRequest(fmt.Sprintf("metadata key %q uses the reserved prefix %q", k, reservedPrefix))
		}
		if n := utf8.RuneCountInString(k); n > 253 {
			return badRequest(fmt.Sprintf("metadata key %q… is %d characters long (at most 253)", string([]rune(k)[:32]), n))
		}
	}
	return nil
}

func (s *Server) createSandbox(c *gin.Context) {
	var req api.CreateSandboxRequest
	if err := decodeBody(c, &req); err != nil {
		s.abortErr(c, err)
		return
	}
	if err := s.pools.applyRef(&req); err != nil {
		s.abortErr(c, err)
		return
	}
	rec, err := s.recordFromRequest(&req)
	if err != nil {
		s.abortErr(c, err)
		return
	}
	spec := s.spec(rec)
	if a := req.Image.Auth; a.Username != "" || a.Password != "" {
		spec.ImageAuth = &runtimes.RegistryAuth{Username: a.Username, Password: a.Password}
	}
	rt, err := s.opts.Runtimes.Select(spec)
	if err != nil {
		s.abortErr(c, err)
		return
	}
	rec.Runtime = rt.Name()
	s.stampOwner(rec)
	if err := checkIsolation(rec); err != nil {
		s.abortErr(c, err)
		return
	}
	if co, ok := rt.(runtimes.ClaimOwner); ok && co.OwnsClaims() {
		rec.Claims = nil // the runtime's (Kubernetes PVCs), not the server's
	} else if err := s.checkClaims(rec); err != nil {
		s.abortErr(c, err)
		return
	}
	// A pool member of this image and runtime makes it a claim; without
	// an idle one (or when the claim fails) the create is served cold.
	if s.claimFromPool(c, rec, rt) {
		return
	}
	defer s.pools.coldCreate()()
	unlock := s.lock(rec.ID)
	defer unlock()
	// What a failed create made is undone, newest first. The record is
	// written once the sandbox exists: a crash before that leaves only a
	// directory (and the sealed vault), which start-up removes.
	bg := context.WithoutCancel(c.Request.Context())
	cu := cleanup.Make(func() {
		_ = mounts.RemoveAll(s.sandboxDir(rec.ID))
		_ = s.store.delete(rec)
	})
	defer cu.Clean()
	undoVolumes, volumesDone, err := s.ensureVolumes(rec)
	if err != nil {
		s.abortErr(c, err)
		return
	}
	defer volumesDone()
	cu.Add(undoVolumes)
	eg, err := s.newEgress(rec, true)
	if err != nil {
		s.abortErr(c, err)
		return
	}
	cu.Add(func() { _ = eg.Close() })
	spec.Egress = eg
	cu.Add(func() { _ = rt.Destroy(bg, s.spec(rec)) })
	sb, err := rt.Create(c.Request.Context(), spec)
	if err != nil {
		s.log.Warn("create sandbox", "id", rec.ID, "runtime", rec.Runtime, "err", err)
		s.abortErr(c, err)
		return
	}
	cu.Add(func() { _ = sb.Close(bg) })
	s.failpoint("created-before-record")
	rec.State, rec.LastTransitionAt = StateRunning, time.Now().UTC()
	if err := s.store.create(rec); err != nil {
		s.abortErr(c, err)
		return
	}
	cu.Release()
	s.mu.Lock()
	s.egress[rec.ID] = eg
	s.mu.Unlock()
	s.attach(rec.ID, sb)
	c.JSON(http.StatusAccepted, rec.wire())
}

func (s *Server) recordFromRequest(req *api.CreateSandboxRequest) (*Record, error) {
	var err error
	if req.SnapshotID != "" {
		return nil, errdefs.New(api.ErrorCodeNOTSUPPORTED, "snapshots are not supported yet; create the sandbox from an image")
	}
	if strings.TrimSpace(req.Image.URI) == "" {
		return nil, badRequest("image.uri is required (for example \"wasm://default\")")
	}
	if err := validateMetadata(req.Metadata); err != nil {
		return nil, err
	}
	for k, v := range req.Extensions {
		if v == "" {
			delete(req.Extensions, k) // null or empty: not given
		}
	}
	if _, err := renewOnAccessOf(req.Extensions); err != nil {
		return nil, err
	}
	for k := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, badRequest(fmt.Sprintf("env name %q is not valid", k))
		}
	}
	var platform *api.Platform
	if p := req.Platform; p != (api.Platform{}) {
		if p.Os != "" && p.Os != api.PlatformOsLinux {
			return nil, badRequest(fmt.Sprintf("platform.os %q is not supported (linux)", p.Os))
		}
		if p.Arch != "" && p.Arch != api.PlatformArchAmd64 && p.Arch != api.PlatformArchArm64 {
			return nil, badRequest(fmt.Sprintf("platform.arch %q is not supported (amd64, arm64)", p.Arch))
		}
		platform = &p
	}
	now := time.Now().UTC()
	rec := &Record{
		ID: newID(), Image: strings.TrimSpace(req.Image.URI), Entrypoint: req.Entrypoint, Env: req.Env,
		Metadata: req.Metadata, Extensions: req.Extensions, ResourceLimits: req.ResourceLimits,
		Platform: platform, CreatedAt: now, Token: newToken(),
	}
	for i, v := range req.Volumes {
		named := v.Pvc.ClaimName != ""
		switch {
		case named && v.Host.Path != "":
			return nil, badRequest(fmt.Sprintf("volumes[%d]: give either host or pvc, not both", i))
		case !named && v.Host.Path == "":
			return nil, badRequest(fmt.Sprintf("volumes[%d]: host.path or pvc.claimName is required", i))
		case !strings.HasPrefix(v.MountPath, "/"):
			return nil, badRequest(fmt.Sprintf("volumes[%d]: mountPath must be an absolute path", i))
		}
		if named {
			vol, claim, err := s.namedVolume(i, v)
			if err != nil {
				return nil, err
			}
			rec.Volumes = append(rec.Volumes, vol)
			if !slices.ContainsFunc(rec.Claims, func(c volumeClaim) bool { return c.Name == claim.Name }) {
				rec.Claims = append(rec.Claims, claim)
			}
			continue
		}
		rec.Volumes = append(rec.Volumes, runtimes.Volume{Name: v.Name, HostPath: v.Host.Path, SubPath: v.SubPath,
			MountPath: v.MountPath, ReadOnly: v.ReadOnly})
	}
	if req.Timeout != nil {
		t := *req.Timeout
		if math.IsNaN(t) || math.IsInf(t, 0) || t < s.opts.MinTimeout.Seconds() {
			return nil, badRequest(fmt.Sprintf("timeout must be at least %d seconds (or null for no expiry)", int(s.opts.MinTimeout.Seconds())))
		}
		if t > s.opts.MaxTimeout.Seconds() {
			return nil, badRequest(fmt.Sprintf("timeout must be at most %d seconds", int(s.opts.MaxTimeout.Seconds())))
		}
		exp := now.Add(time.Duration(t * float64(time.Second)))
		rec.ExpiresAt = &exp
	}
	if rec.NetworkPolicy, err = networkPolicyOf(req.NetworkPolicy); err != nil {
		return nil, err
	}
	rec.CredentialProxy = req.CredentialProxy != nil && req.CredentialProxy.Enabled
	if rec.CredentialProxy && rec.NetworkPolicy == nil {
		return nil, badRequest("credentialProxy needs a networkPolicy: binding hosts must be allowed by one")
	}
	if v := strings.TrimSpace(req.ResourceLimits["gpu"]); v != "" && v != "0" {
		return nil, errdefs.New(api.ErrorCodeNOTSUPPORTED, "resourceLimits.gpu: this server has no GPUs to give a sandbox")
	}
	if v, ok := req.ResourceLimits["memory"]; ok && v != "" {
		n, err := ParseQuantityBytes(v)
		if err != nil {
			return nil, badRequest("resourceLimits.memory: " + err.Error())
		}
		rec.MemoryBytes = n
	}
	if v, ok := req.ResourceLimits["cpu"]; ok && v != "" {
		n, err := ParseCPUMillis(v)
		if err != nil {
			return nil, badRequest("resourceLimits.cpu: " + err.Error())
		}
		rec.CPUMillis = n
	}
	return rec, nil
}

func (s *Server) getRecord(c *gin.Context) (*Record, bool) {
	r, err := s.store.get(c.Param("id"))
	if err != nil {
		s.abortErr(c, err)
		return nil, false
	}
	return r, true
}

func (s *Server) getSandbox(c *gin.Context) {
	r, ok := s.getRecord(c)
	if !ok {
		return
	}
	c.JSON(http.StatusOK, r.wire())
}

func (s *Server) deleteSandbox(c *gin.Context) {
	unlock := s.lock(c.Param("id"))
	defer unlock()
	r, ok := s.getRecord(c)
	if !ok {
		return
	}
	if err := s.destroy(c.Request.Context(), r); err != nil {
		s.abortErr(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

func (s *Server) listSandboxes(c *gin.Context) {
	q := c.Request.URL.Query()
	states := map[string]bool{}
	for _, v := range q["state"] {
		if strings.TrimSpace(v) == "" {
			s.abortErr(c, badRequest(fmt.Sprintf("state must name a state (known: %s), not be empty", strings.Join(allStates, ", "))))
			return
		}
		for _, st := range strings.Split(v, ",") {
			if st = strings.TrimSpace(st); st != "" {
				// Any state string is accepted, case-insensitively (as
				// OpenSandbox does): one no sandbox has, such as a
				// cluster's transient Allocated, matches nothing.
				canon := "?" + strings.ToLower(st)
				for _, known := range allStates {
					if strings.EqualFold(known, st) {
						canon = known
					}
				}
				states[canon] = true
			}
		}
	}
	var md url.Values
	if v := q.Get("metadata"); v != "" {
		var err error
		if md, err = url.ParseQuery(v); err != nil {
			s.abortErr(c, badRequest("metadata filter must be k=v pairs joined by &: "+err.Error()))
			return
		}
	}
	page, err := intParam(q, "page", 1)
	if err != nil {
		s.abortErr(c, err)
		return
	}
	size, err := intParam(q, "pageSize", 20)
	if err != nil {
		s.abortErr(c, err)
		return
	}
	if size > 200 {
		size = 200
	}
	recs, err := s.store.list()
	if err != nil {
		s.abortErr(c, err)
		return
	}
	var items []api.Sandbox
	for _, r := range recs {
		if len(states) > 0 && !states[r.State] {
			continue
		}
		match := true
		for k, vs := range md {
			if got, ok := r.Metadata[k]; !ok || got != vs[len(vs)-1] {
				match = false
				break
			}
		}
		if match {
			items = append(items, r.wire())
		}
	}
	sort.Slice(items, func(i, j int) bool {
		if !items[i].CreatedAt.Equal(items[j].CreatedAt) {
			return items[i].CreatedAt.After(items[j].CreatedAt)
		}
		return items[i].ID < items[j].ID
	})
	total := len(items)
	pages := (total + size - 1) / size
	lo := total
	if page-1 < (total+size-1)/size { // never (page-1)*size: it can overflow
		lo = (page - 1) * size
	}
	hi := lo + size
	if hi > total {
		hi = total
	}
	out := items[lo:hi]
	if out == nil {
		out = []api.Sandbox{}
	}
	c.JSON(http.StatusOK, api.ListSandboxesResponse{Items: out, Pagination: api.Pagination{
		Page: page, PageSize: size, TotalItems: total, TotalPages: pages, HasNextPage: page < pages,
	}})
}

func intParam(q url.Values, name string, def int) (int, error) {
	vs, given := q[name]
	if !given {
		return def, nil
	}
	v := vs[0]
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, badRequest(fmt.Sprintf("%s must be a positive integer", name))
	}
	return n, nil
}

func (s *Server) patchMetadata(c *gin.Context) {
	unlock := s.lock(c.Param("id"))
	defer unlock()
	r, ok := s.getRecord(c)
	if !ok {
		return
	}
	var patch map[string]json.RawMessage
	if err := decodeBody(c, &patch); err != nil {
		s.abortErr(c, err)
		return
	}
	// The patch's keys follow the rules of metadata keys, also those
	// that delete.
	named := make(map[string]string, len(patch))
	for k := range patch {
		named[k] = ""
	}
	if err := validateMetadata(named); err != nil {
		s.abortErr(c, err)
		return
	}
	next := map[string]string{}
	for k, v := range r.Metadata {
		next[k] = v
	}
	for k, raw := range patch {
		if string(raw) == "null" {
			delete(next, k)
			continue
		}
		var v string
		if err := json.Unmarshal(raw, &v); err != nil {
			s.abortErr(c, badRequest(fmt.Sprintf("metadata %q: values must be strings or null", k)))
			return
		}
		next[k] = v
	}
	if err := validateMetadata(next); err != nil {
		s.abortErr(c, err)
		return
	}
	r.Metadata = next
	if err := s.store.put(r); err != nil {
		s.abortErr(c, err)
		return
	}
	c.JSON(http.StatusOK, r.wire())
}

func (s *Server) liveSandbox(id string) (runtimes.Sandbox, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.live[id]
	return sb, ok
}

func (s *Server) pauseSandbox(c *gin.Context)  { s.transition(c, true) }
func (s *Server) resumeSandbox(c *gin.Context) { s.transition(c, false) }

func (s *Server) transition(c *gin.Context, pause bool) {
	unlock := s.lock(c.Param("id"))
	defer unlock()
	r, ok := s.getRecord(c)
	if !ok {
		return
	}
	from, mid, to := StateRunning, StatePausing, StatePaused
	if !pause {
		from, mid, to = StatePaused, StateResuming, StateRunning
	}
	if r.State != from {
		s.abortErr(c, errdefs.New(api.ErrorCodeINVALIDSTATE, "sandbox %s is %s; it must be %s", r.ID, r.State, from))
		return
	}
	sb, err := s.liveOf(c.Request.Context(), r)
	if err != nil {
		s.abortErr(c, err)
		return
	}
	s.setState(r, mid, "", "")
	if pause {
		err = sb.Pause(c.Request.Context())
	} else {
		err = sb.Resume(c.Request.Context())
	}
	if err != nil {
		s.setState(r, from, "TransitionFailed", err.Error())
		s.abortErr(c, err)
		return
	}
	s.setState(r, to, "", "")
	c.Status(http.StatusAccepted)
}

func (s *Server) renewSandbox(c *gin.Context) {
	unlock := s.lock(c.Param("id"))
	defer unlock()
	r, ok := s.getRecord(c)
	if !ok {
		return
	}
	var req api.RenewExpirationRequest
	if err := decodeBody(c, &req); err != nil {
		s.abortErr(c, err)
		return
	}
	if req.ExpiresAt.IsZero() {
		s.abortErr(c, badRequest("expiresAt is required (RFC 3339)"))
		return
	}
	exp := req.ExpiresAt.UTC()
	if !exp.After(time.Now()) {
		s.abortErr(c, badRequest("expiresAt must be in the future"))
		return
	}
	if exp.Sub(time.Now()) > s.opts.MaxTimeout {
		s.abortErr(c, badRequest(fmt.Sprintf("expiresAt must be within %s from now", s.opts.MaxTimeout)))
		return
	}
	r.ExpiresAt = &exp
	if err := s.store.put(r); err != nil {
		s.abortErr(c, err)
		return
	}
	c.JSON(http.StatusOK, api.RenewExpirationResponse{ExpiresAt: exp})
}

// execdPort is the sandbox port of the execd API.
const execdPort = 44772

func (s *Server) getEndpoint(c *gin.Context) {
	r, ok := s.getRecord(c)
	if !ok {
		return
	}
	port, err := strconv.Atoi(c.Param("port"))
	if err != nil || port < 1 || port > 65535 {
		s.abortErr(c, badRequest("port must be an integer from 1 to 65535"))
		return
	}
	host := s.opts.PublicHost
	if host == "" {
		host = c.Request.Host
	}
	prefix := ""
	if strings.HasPrefix(c.Request.URL.Path, "/v1/") {
		prefix = "/v1"
	}
	headers := map[string]string{headerExecdToken: r.Token}
	if port == egressPort {
		headers = map[string]string{headerEgressAuth: egressToken(r)}
	}
	expires, given := c.GetQuery("expires")
	if given && strings.TrimSpace(expires) == "" {
		s.abortErr(c, badRequest("expires must be a unix time in seconds, not empty"))
		return
	}
	signed, err := s.routeTokenHeaders(r.ID, port, expires)
	if err != nil {
		s.abortErr(c, err)
		return
	}
	if signed != nil {
		// A signed route carries only the expiring token, not the
		// sandbox's long-lived one.
		headers = signed
	}
	c.JSON(http.StatusOK, api.Endpoint{
		Endpoint: fmt.Sprintf("%s%s/sandboxes/%s/proxy/%d", host, prefix, r.ID, port),
		Headers:  headers,
	})
}
