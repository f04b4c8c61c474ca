package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/hybox-dev/hybox/ingress"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// Replicas. When Options.Shared is set the server is one of several behind
// one address: the records of sandboxes every replica can reach (container
// sandboxes on a cluster) live in the shared store, and a replica that gets
// a request for one it has no live sandbox of adopts it on the spot
// (adopt: its egress controller rebuilt from the record, the runtime's
// Restore), whoever created it. Killing a replica therefore loses none of
// them. The reaper reaps shared records only on the leading replica;
// every replica reaps its own. Keys that must be alike on every replica
// (the route signing key) come from the shared store.

// routeKey returns the key that signs route tokens: the shared one among
// replicas, else this server's own (in the data directory).
func (s *Server) routeKey(ctx context.Context) ([]byte, error) {
	if s.opts.Shared == nil {
		return loadRouteKey(s.opts.DataDir)
	}
	ctx, cancel := context.WithTimeout(ctx, sharedTimeout)
	defer cancel()
	b, err := s.opts.Shared.Key(ctx, "route", 32)
	if err != nil {
		return nil, fmt.Errorf("route key from the shared store: %w", err)
	}
	return b, nil
}

// liveOf returns rec's live sandbox, adopting a shared one this replica
// has none of.
//
// # Errors
// ErrUnavailable (503) when rec is not in a state that can be served or
// its runtime cannot restore it; the runtime's error otherwise.
func (s *Server) liveOf(ctx context.Context, rec *Record) (runtimes.Sandbox, error) {
	if sb, ok := s.liveSandbox(rec.ID); ok {
		return sb, nil
	}
	if !s.store.isShared(rec) {
		if rec.Message != "" && rec.State == StateFailed {
			return nil, errdefs.New(api.ErrorCodeUNAVAILABLE, "sandbox %s is %s: %s", rec.ID, rec.State, rec.Message)
		}
		return nil, errdefs.New(api.ErrorCodeUNAVAILABLE, "sandbox %s is %s", rec.ID, rec.State)
	}
	unlock := s.adopting.lock(rec.ID)
	defer unlock()
	if sb, ok := s.liveSandbox(rec.ID); ok {
		return sb, nil
	}
	switch rec.State {
	case StateRunning, StatePaused:
	default:
		return nil, errdefs.New(api.ErrorCodeUNAVAILABLE, "sandbox %s is %s", rec.ID, rec.State)
	}
	rt, ok := s.opts.Runtimes.Get(rec.Runtime)
	if !ok {
		return nil, errdefs.New(api.ErrorCodeUNAVAILABLE, "sandbox %s: runtime %q is not available on this replica", rec.ID, rec.Runtime)
	}
	eg, err := s.newEgress(rec, false)
	if err != nil {
		return nil, err
	}
	spec := s.spec(rec)
	spec.Egress = eg
	sb, err := rt.Restore(ctx, spec)
	if err != nil {
		_ = eg.Close()
		return nil, fmt.Errorf("adopt sandbox %s: %w", rec.ID, err)
	}
	s.log.Info("adopted a sandbox of the shared store", "id", rec.ID, "runtime", rec.Runtime)
	s.mu.Lock()
	s.egress[rec.ID] = eg
	s.mu.Unlock()
	s.attach(rec.ID, sb)
	return sb, nil
}

// forget drops this replica's live sandbox of id, whose record is gone
// (another replica deleted it): the instance is closed, not destroyed.
func (s *Server) forget(ctx context.Context, id string) {
	if s.opts.Shared == nil {
		return
	}
	sb, eg := s.detach(id)
	if sb != nil {
		s.log.Info("dropping a sandbox another replica deleted", "id", id)
		_ = sb.Close(ctx)
	}
	if eg != nil {
		_ = eg.Close()
	}
}

// headerForwardedBy marks a request one replica forwarded to the owner of
// its sandbox; such a request is never forwarded again.
const headerForwardedBy = "X-Hybox-Forwarded-By"

// reasonOwnerLost is the reason of a sandbox whose owner replica is gone.
const reasonOwnerLost = "OwnerLost"

// reapable returns the records this replica's reaper looks at: its own,
// and when it leads, the shared records and the copies of sandboxes whose
// owner is gone.
func (s *Server) reapable(ctx context.Context) ([]*Record, error) {
	recs, err := s.store.listLocal()
	if err != nil || s.opts.Shared == nil || !s.opts.Shared.Leading() {
		return recs, err
	}
	all, err := s.store.list()
	if err != nil {
		return nil, err
	}
	own := map[string]bool{}
	for _, r := range recs {
		own[r.ID] = true
	}
	for _, r := range all {
		switch {
		case own[r.ID]:
		case s.store.isShared(r):
			recs = append(recs, r)
		case r.Owner != "" && r.Owner != s.opts.Replica:
			if alive, err := s.opts.Shared.Alive(ctx, r.Owner); err == nil && !alive {
				recs = append(recs, r)
			}
		}
	}
	return recs, nil
}

// stampOwner names this replica as the owner of rec when rec lives in this
// process alone among several replicas.
func (s *Server) stampOwner(rec *Record) {
	if s.opts.Shared != nil && !s.store.isShared(rec) {
		rec.Owner, rec.OwnerAddress = s.opts.Replica, s.opts.ReplicaAddress
	}
}

// sandboxOfRequest returns the id of the sandbox r is about ("" when none):
// a lifecycle or proxy path (/sandboxes/{id}..., with or without /v1), or
// an ingress header or host route.
func sandboxOfRequest(r *http.Request, rt *ingress.Router) string {
	if rt.Claims(r) {
		return rt.Sandbox(r)
	}
	p := strings.TrimPrefix(r.URL.Path, "/v1")
	rest, ok := strings.CutPrefix(p, "/sandboxes/")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, "/")
	return id
}

// forward sends r to the replica that owns its sandbox when that is
// another one, and reports whether it did (then the answer is written). A
// sandbox whose owner is gone is taken over here when its directory is in
// the shared directory (takeover.go), else marked lost and served here as
// such.
// When it does not forward, it returns r with the record it read attached
// (fetchedRecord), so that the proxy path does not read it again.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, rt *ingress.Router) (bool, *http.Request) {
	return s.forwardOnce(w, r, rt, false)
}

// forwardOnce is forward; retried says the record was read again after a
// takeover lost to another replica's.
func (s *Server) forwardOnce(w http.ResponseWriter, r *http.Request, rt *ingress.Router, retried bool) (bool, *http.Request) {
	if s.opts.Shared == nil {
		return false, r
	}
	id := sandboxOfRequest(r, rt)
	if id == "" {
		return false, r
	}
	if s.store.hasLocal(id) {
		if s.fenced() {
			errdefs.Write(w, errdefs.New(api.ErrorCodeUNAVAILABLE, "replica %s has not renewed its heartbeat in the shared store in time, so another replica may have taken sandbox %s over; it serves it again once it has made sure it has not", s.opts.Replica, id))
			return true, r
		}
		return false, r
	}
	if r.Header.Get(headerForwardedBy) != "" {
		return false, r // forwarded once already
	}
	rec, err := s.store.get(id)
	if err != nil {
		return false, r // answered here: not found
	}
	if s.store.isShared(rec) || rec.Owner == "" || rec.Owner == s.opts.Replica {
		// A Pod sandbox, or ours: served here.
		return false, r.WithContext(context.WithValue(r.Context(), fetchedKey{}, rec))
	}
	ctx, cancel := context.WithTimeout(r.Context(), sharedTimeout)
	alive, err := s.opts.Shared.Alive(ctx, rec.Owner)
	cancel()
	if err != nil {
		errdefs.Write(w, sharedErr("is replica "+rec.Owner+" alive", err))
		return true, r
	}
	if !alive {
		if s.opts.SharedDir == "" {
			s.markLost(rec, nil)
			return false, r.WithContext(context.WithValue(r.Context(), fetchedKey{}, rec))
		}
		// Not the request's context: a client that goes away must not
		// leave a takeover half done.
		nr, err := s.takeOver(context.WithoutCancel(r.Context()), id)
		switch {
		case err == nil:
			return false, r.WithContext(context.WithValue(r.Context(), fetchedKey{}, nr))
		case errors.Is(err, errEnded):
			return false, r.WithContext(context.WithValue(r.Context(), fetchedKey{}, nr))
		case !retried && (errors.Is(err, errdefs.ErrConflict) || errors.Is(err, errOwnerAlive) || errors.Is(err, errNoSavedState)):
			// Another replica took it over first (and may have moved
			// its directory already), or its owner is back: ask again,
			// and forward to whoever owns it now.
			return s.forwardOnce(w, r, rt, true)
		case errors.Is(err, errNoSavedState):
			s.markLost(rec, err)
			return false, r.WithContext(context.WithValue(r.Context(), fetchedKey{}, rec))
		case errors.Is(err, errdefs.ErrConflict) || errors.Is(err, errOwnerAlive):
			errdefs.Write(w, errdefs.New(api.ErrorCodeUNAVAILABLE, "sandbox %s is changing replicas (%v); try again", id, err))
			return true, r
		default:
			errdefs.Write(w, err)
			return true, r
		}
	}
	target, err := url.Parse(rec.OwnerAddress)
	if err != nil || target.Host == "" {
		errdefs.Write(w, errdefs.New(api.ErrorCodeUNAVAILABLE, "sandbox %s lives in replica %s, whose address %q is not usable", id, rec.Owner, rec.OwnerAddress))
		return true, r
	}
	s.toOwner(id, rec.Owner, target).ServeHTTP(w, r)
	return true, r
}

// toOwner returns the handler that passes a request about sandbox id on to
// target, the address of its owner replica. It is full duplex: a request's
// body still passes on after the owner has begun its answer (a command's
// stream does; without, net/http closes the body under the transport's
// last read of it, and the stream is cut after its first event).
func (s *Server) toOwner(id, owner string, target *url.URL) http.Handler {
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Set(headerForwardedBy, s.opts.Replica)
		},
		FlushInterval: -1, // streams (SSE, command output) pass at once
		ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			s.log.Warn("forward to the owner replica", "id", id, "owner", owner, "err", err)
			errdefs.Write(w, errdefs.New(api.ErrorCodeUNAVAILABLE, "sandbox %s lives in replica %s, which does not answer", id, owner))
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		p.ServeHTTP(w, r)
	})
}

// fetchedKey carries the record forward read for its request.
type fetchedKey struct{}

// proxyRecord returns the record of id for the proxy path: the one read
// for this request already (forward), else the store's. Lifecycle handlers
// read theirs under the sandbox's lock instead (getRecord).
func (s *Server) proxyRecord(ctx context.Context, id string) (*Record, error) {
	if r, ok := ctx.Value(fetchedKey{}).(*Record); ok && r.ID == id {
		return r, nil
	}
	return s.store.get(id)
}

// markLost records that rec's owner replica is gone and that its sandbox
// cannot be taken over (why, when SharedDir is set): its copy says
// Failed, OwnerLost, so every replica lists it as lost rather than
// missing. The owner, started again with its data directory, serves it
// again.
func (s *Server) markLost(rec *Record, why error) {
	if rec.State == StateFailed && rec.Reason == reasonOwnerLost {
		return
	}
	rec.LostState = rec.State
	rec.State, rec.Reason = StateFailed, reasonOwnerLost
	rec.Message = fmt.Sprintf("this sandbox lived in replica %s, which is gone; a wasm sandbox lives in the process that made it and its state stayed there (delete it, or start that replica again)", rec.Owner)
	if why != nil {
		rec.Message = fmt.Sprintf("this sandbox lived in replica %s, which is gone, and cannot be taken over (%v); delete it, or start that replica again", rec.Owner, why)
	}
	rec.LastTransitionAt = time.Now().UTC()
	s.log.Warn("sandbox lost with its replica", "id", rec.ID, "owner", rec.Owner)
	if err := s.store.putCopy(rec); err != nil {
		s.log.Warn("mark sandbox lost", "id", rec.ID, "err", err)
	}
}

// sweepEvery is how many reaper rounds pass between two sweeps of what
// dead replicas left (sweepReplicas).
const sweepEvery = 10

// sweepReplicas, on the leading replica, removes the Pods of shared
// runtimes that have no record and were made by a replica that is gone: a
// create it was in the middle of, its pool members. What a living replica
// makes is left alone, and so is what names no maker. With SharedDir it
// also takes over the sandboxes of replicas that are gone (sweepShared).
func (s *Server) sweepReplicas(ctx context.Context) {
	if s.opts.Shared == nil || !s.opts.Shared.Leading() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*sharedTimeout)
	defer cancel()
	recs, err := s.opts.Shared.List(ctx)
	if err != nil {
		s.log.Warn("sweep: list shared records", "err", err)
		return
	}
	known := map[string]bool{}
	for _, r := range recs {
		known[r.ID] = true
	}
	// Members of shared pools have records of their own.
	members, err := s.opts.Shared.Members(ctx, "")
	if err != nil {
		s.log.Warn("sweep: list shared pool members", "err", err)
		return
	}
	for _, m := range members {
		known[m.ID] = true
	}
	seen := map[string]bool{}
	alive := func(replica string) bool {
		ok, done := seen[replica]
		if !done {
			var err error
			if ok, err = s.opts.Shared.Alive(ctx, replica); err != nil {
				ok = true // not known to be gone
			}
			seen[replica] = ok
		}
		return ok
	}
	if s.opts.SharedDir != "" {
		var copies []*Record
		for _, sr := range recs {
			r := &Record{}
			if err := json.Unmarshal(sr.Data, r); err == nil {
				copies = append(copies, r)
			}
		}
		s.sweepShared(ctx, copies, alive)
	}
	keep := func(id, maker string) bool {
		if known[id] || maker == "" || maker == s.opts.Replica {
			return true
		}
		ok := alive(maker)
		if !ok {
			s.log.Info("sweep: removing a sandbox a replica that is gone left without a record", "id", id, "replica", maker)
		}
		return ok
	}
	done := map[runtimes.ReplicaSweeper]bool{}
	for _, name := range s.opts.Runtimes.Names() {
		rt, _ := s.opts.Runtimes.Get(name)
		sw, ok := rt.(runtimes.ReplicaSweeper)
		if !ok || done[sw] || !s.opts.Shared.Shares(name) {
			continue
		}
		done[sw] = true
		if err := sw.SweepReplicas(ctx, keep); err != nil {
			s.log.Warn("sweep what gone replicas left", "runtime", name, "err", err)
		}
	}
}
