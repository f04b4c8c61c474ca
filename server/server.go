// Package server is hybox's lifecycle API: the OpenSandbox-compatible REST
// routes (gin), API-key authentication, persistence of sandbox records in an
// embedded database, the TTL reaper, the proxy route that carries each
// sandbox's execd API, and the one-shot run endpoint.
package server

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/hybox-dev/hybox/ingress"
	"github.com/hybox-dev/hybox/internal/cleanup"
	"github.com/hybox-dev/hybox/internal/mounts"
	"github.com/hybox-dev/hybox/internal/shared"
	"github.com/hybox-dev/hybox/policy/egress"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/vault"
)

// Options configures a Server.
type Options struct {
	// DataDir holds the database and every sandbox's directory. Required.
	DataDir string
	// APIKey is required in OPEN-SANDBOX-API-KEY unless Insecure.
	APIKey string
	// Insecure serves without authentication. It must be chosen explicitly.
	Insecure bool
	// Runtimes picks a runtime for each sandbox. Required.
	Runtimes *runtimes.Selector
	// PublicHost is the host[:port] put into endpoints; "" = the request's Host.
	PublicHost string
	// ReapInterval is how often expired sandboxes are looked for (default 5 s).
	ReapInterval time.Duration
	// MinTimeout is the smallest sandbox timeout accepted (default 60 s).
	MinTimeout time.Duration
	// MaxTimeout caps a sandbox timeout (default 7 days).
	MaxTimeout time.Duration
	// IngressDomain enables host routing: <id>-<port>.<IngressDomain>.
	IngressDomain string
	// Images manages container images; nil when no container backend runs.
	Images runtimes.ImageStore
	// OneShotRuntime is the runtime name used for POST /run (default "wasm").
	OneShotRuntime string
	// OneShotImage is the image of POST /run's sandboxes (default
	// "wasm://default").
	OneShotImage string
	// Egress builds each sandbox's egress controller; nil = one with the
	// host's resolvers and trust store.
	Egress *egress.Manager
	// VaultKey seals credential vaults at rest; nil turns the credential
	// proxy off (creating a sandbox that asks for it fails clearly).
	VaultKey *vault.Key
	// Pools are the warm pools of the configuration file (those created
	// through the API are kept in the database).
	Pools []api.CreatePoolRequest
	// Shared keeps the records of the sandboxes every replica of the server
	// serves (container sandboxes on a cluster) when the server is one of
	// several; nil = a server alone, everything in its own database.
	Shared shared.Store
	// Replica names this server among the replicas and ReplicaAddress is
	// the base URL (http://host:port) where the others reach it; both are
	// required with Shared.
	Replica        string
	ReplicaAddress string
	// SharedDir, with Shared, is a directory every replica mounts (a
	// ReadWriteMany volume) where this replica keeps the directories of
	// the sandboxes that live in its process (wasm: workspace and saved
	// contexts), under replicas/<Replica>/sandboxes, so that another
	// replica can take over such a sandbox when this one is gone
	// (takeover.go). "" = they stay in DataDir and are lost with it.
	SharedDir string
	// Failpoint, for crash tests only, names a step at which the server
	// kills itself with SIGKILL ("pool-claimed", "created-before-record").
	Failpoint string
	// Logger; nil = slog.Default().
	Logger *slog.Logger
}

// Validate fills defaults and checks required fields.
//
// # Errors
// When DataDir or Runtimes is missing, or no API key is set without Insecure.
func (o *Options) Validate() error {
	if o.DataDir == "" {
		return errors.New("server: DataDir is required")
	}
	if o.Runtimes == nil {
		return errors.New("server: Runtimes is required")
	}
	if o.Shared != nil && (o.Replica == "" || o.ReplicaAddress == "") {
		return errors.New("server: Replica and ReplicaAddress are required with Shared")
	}
	if o.SharedDir != "" {
		if !filepath.IsAbs(o.SharedDir) {
			return fmt.Errorf("server: SharedDir %q is not an absolute path", o.SharedDir)
		}
		if o.Shared == nil {
			return errors.New("server: SharedDir needs Shared (a directory shared by replicas that share no records is of no use)")
		}
		if !validReplicaDir(o.Replica) {
			return fmt.Errorf("server: replica name %q cannot name a directory in SharedDir", o.Replica)
		}
	}
	if o.APIKey == "" && !o.Insecure {
		return errors.New("server: an API key is required (set --api-key, HYBOX_API_KEY or api_key in the config), or start explicitly with --insecure")
	}
	if o.ReapInterval <= 0 {
		o.ReapInterval = 5 * time.Second
	}
	if o.MinTimeout <= 0 {
		o.MinTimeout = 60 * time.Second
	}
	if o.MaxTimeout <= 0 {
		o.MaxTimeout = 7 * 24 * time.Hour
	}
	if o.OneShotImage == "" {
		o.OneShotImage = "wasm://default"
	}
	if o.OneShotRuntime == "" {
		o.OneShotRuntime = "wasm"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Egress == nil {
		m, err := egress.NewManager(egress.Options{Logger: o.Logger})
		if err != nil {
			return fmt.Errorf("server: egress: %w", err)
		}
		o.Egress = m
	}
	return nil
}

// Server is the hybox lifecycle server.
type Server struct {
	opts   Options
	store  *store
	log    *slog.Logger
	gin    *gin.Engine
	h      http.Handler // gin behind the ingress router
	signer *ingress.Signer

	mu   sync.Mutex
	live map[string]runtimes.Sandbox
	// egress holds the egress controller of every live sandbox.
	egress map[string]*egress.Controller
	// creatingOn counts the creates in flight that mount each named volume.
	creatingOn map[string]int
	// locks serialises lifecycle operations per sandbox.
	locks keyedLocks
	// renew dedupes renewals on access in flight (renew.go).
	renew renewer
	// adopting serialises adoptions of shared sandboxes (replicas.go), apart
	// from locks: the lifecycle handlers that adopt already hold those.
	adopting keyedLocks
	// verified is the count of heartbeat lapses (shared.Store.Lapses)
	// after which this replica last made sure its sandboxes are still its
	// own (takeover.go); while the store counts more, it serves none of
	// them.
	verified atomic.Uint64

	// pools are the warm pools of container sandboxes.
	pools *poolSet

	stopReaper context.CancelFunc
	reaperDone chan struct{}
	fenceDone  chan struct{} // the fence (takeover.go) has stopped
}

// New opens the database, re-attaches surviving sandboxes, deletes expired
// ones and starts the reaper.
//
// # Errors
// When options are invalid or the data directory or database cannot be opened.
func New(ctx context.Context, opts Options) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	for _, d := range []string{opts.DataDir, sandboxesRoot(opts), filepath.Join(opts.DataDir, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("data directory: %w", err)
		}
	}
	st, err := openStore(filepath.Join(opts.DataDir, "hybox.db"), opts.Shared, opts.Logger)
	if err != nil {
		return nil, err
	}
	cu := cleanup.Make(func() { _ = st.close() })
	defer cu.Clean()
	s := &Server{opts: opts, store: st, log: opts.Logger, live: map[string]runtimes.Sandbox{},
		egress: map[string]*egress.Controller{}, creatingOn: map[string]int{}}
	if opts.SharedDir != "" {
		st.copyBlobs = true
		st.takenOver = func(id string) { go s.forgetTaken(id) }
		st.holdsDir = s.holdsDir
	}
	s.pools = newPoolSet(s)
	key, err := s.routeKey(ctx)
	if err != nil {
		return nil, err
	}
	if s.signer, err = ingress.NewSigner(key); err != nil {
		return nil, err
	}
	s.gin = s.routes()
	if s.h, err = s.withIngress(s.gin); err != nil {
		return nil, err
	}
	if err := s.recover(ctx); err != nil {
		return nil, err
	}
	s.pools.start()
	cu.Release()
	rctx, cancel := context.WithCancel(context.Background())
	s.stopReaper = cancel
	s.reaperDone = make(chan struct{})
	s.fenceDone = make(chan struct{})
	go s.reaper(rctx)
	go s.fence(rctx)
	return s, nil
}

// Handler is the HTTP handler of the whole API.
func (s *Server) Handler() http.Handler { return s.h }

// Serve serves on l until ctx is done, then shuts down gracefully.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	hs := &http.Server{Handler: s.h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return hs.Shutdown(sctx)
}

// Close stops the reaper, closes live sandboxes (their files stay) and the
// database.
func (s *Server) Close(ctx context.Context) error {
	s.stopReaper()
	<-s.reaperDone
	<-s.fenceDone
	s.pools.close(ctx)
	s.mu.Lock()
	live, eg := s.live, s.egress
	s.live, s.egress = map[string]runtimes.Sandbox{}, map[string]*egress.Controller{}
	s.mu.Unlock()
	for _, sb := range live {
		_ = sb.Close(ctx)
	}
	for _, e := range eg {
		_ = e.Close()
	}
	return s.store.close()
}

func (s *Server) lock(id string) func() { return s.locks.lock(id) }

// keyedLocks is a mutex per key (a sandbox id).
type keyedLocks struct{ m sync.Map } // id → *sync.Mutex

func (k *keyedLocks) of(id string) *sync.Mutex {
	m, _ := k.m.LoadOrStore(id, &sync.Mutex{})
	return m.(*sync.Mutex)
}

// lock locks id's mutex and returns its unlock.
func (k *keyedLocks) lock(id string) func() {
	mu := k.of(id)
	mu.Lock()
	return mu.Unlock
}

// sandboxDir is the directory of this replica's sandbox id.
func (s *Server) sandboxDir(id string) string {
	return filepath.Join(sandboxesRoot(s.opts), id)
}

func (s *Server) spec(r *Record) runtimes.Spec {
	return runtimes.Spec{ID: r.ID, Image: r.Image, Entrypoint: r.Entrypoint, Env: r.Env,
		MemoryBytes: r.MemoryBytes, CPUMillis: r.CPUMillis, Extensions: r.Extensions, Volumes: r.Volumes,
		Dir: s.sandboxDir(r.ID)}
}

// recover re-attaches every stored sandbox after a restart.
func (s *Server) recover(ctx context.Context) error {
	recs, err := s.store.listLocal()
	if err != nil {
		return err
	}
	recs = s.reconcile(ctx, recs)
	members, err := s.store.listMembers()
	if err != nil {
		return err
	}
	// Pool members' directories and containers are not orphans.
	known := slices.Clone(recs)
	for _, m := range members {
		known = append(known, &Record{ID: m.ID})
	}
	s.removeOrphans(known)
	s.sweep(ctx, known)
	defer func() { s.pools.load(ctx, s.opts.Pools, members, recs) }()
	now := time.Now()
	for _, r := range recs {
		if s.store.isShared(r) {
			continue // adopted on first use (adopt); reaped by the leader
		}
		if r.ExpiresAt != nil && now.After(*r.ExpiresAt) {
			s.log.Info("deleting sandbox that expired while the server was down", "id", r.ID, "expiresAt", r.ExpiresAt)
			if err := s.destroy(ctx, r); err != nil {
				s.log.Warn("delete expired sandbox", "id", r.ID, "err", err)
			}
			continue
		}
		if r.State == StateFailed || r.State == StateTerminated {
			continue
		}
		s.restoreLocal(ctx, r)
	}
	return nil
}

// restoreLocal brings back the live sandbox of r, a record of this
// replica's own (after a restart, or a takeover), in the state r says; a
// sandbox that cannot be restored is recorded Failed with the reason.
func (s *Server) restoreLocal(ctx context.Context, r *Record) {
	rt, ok := s.opts.Runtimes.Get(r.Runtime)
	if !ok {
		s.setState(r, StateFailed, "RuntimeUnavailable", fmt.Sprintf("runtime %q is not available on this server", r.Runtime))
		return
	}
	eg, err := s.newEgress(r, false)
	if err != nil {
		s.log.Warn("restore sandbox egress", "id", r.ID, "err", err)
		s.setState(r, StateFailed, "RestoreFailed", err.Error())
		return
	}
	spec := s.spec(r)
	spec.Egress = eg
	sb, err := rt.Restore(ctx, spec)
	if err != nil {
		_ = eg.Close()
		s.log.Warn("restore sandbox", "id", r.ID, "err", err)
		s.setState(r, StateFailed, "RestoreFailed", err.Error())
		return
	}
	s.mu.Lock()
	s.egress[r.ID] = eg
	s.mu.Unlock()
	s.stampOwner(r) // this replica's name and address may have changed
	switch r.State {
	case StatePaused, StatePausing:
		_ = sb.Pause(ctx)
		s.setState(r, StatePaused, "", "")
	default:
		s.setState(r, StateRunning, "", "")
	}
	s.attach(r.ID, sb)
}

// detach takes id's live sandbox and egress controller out of the server's
// maps and returns them (nil when it has none) for the caller to close.
func (s *Server) detach(id string) (runtimes.Sandbox, *egress.Controller) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, eg := s.live[id], s.egress[id]
	delete(s.live, id)
	delete(s.egress, id)
	return sb, eg
}

// attach makes sb the live sandbox of id and, for sandboxes that can end
// on their own, records how they ended.
func (s *Server) attach(id string, sb runtimes.Sandbox) {
	s.mu.Lock()
	s.live[id] = sb
	s.mu.Unlock()
	ex, ok := sb.(runtimes.Exiter)
	if !ok {
		return
	}
	go func() {
		st, ok := <-ex.Exited()
		if !ok {
			return
		}
		unlock := s.lock(id)
		defer unlock()
		s.mu.Lock()
		cur := s.live[id]
		if cur == sb {
			delete(s.live, id)
		}
		s.mu.Unlock()
		if cur != sb {
			return // deleted or replaced meanwhile
		}
		rec, err := s.store.get(id)
		if err != nil {
			return
		}
		state := StateTerminated
		if st.Reason == "OOMKilled" || st.Code != 0 {
			state = StateFailed
		}
		s.log.Info("sandbox ended", "id", id, "code", st.Code, "reason", st.Reason)
		s.setState(rec, state, st.Reason, fmt.Sprintf("the sandbox's main process ended with code %d", st.Code))
	}()
}

// sweep asks every runtime that can to remove sandboxes without a record.
func (s *Server) sweep(ctx context.Context, recs []*Record) {
	known := map[string]bool{}
	for _, r := range recs {
		known[r.ID] = true
	}
	done := map[runtimes.Sweeper]bool{}
	for _, name := range s.opts.Runtimes.Names() {
		rt, _ := s.opts.Runtimes.Get(name)
		sw, ok := rt.(runtimes.Sweeper)
		if !ok || done[sw] {
			continue
		}
		if s.opts.Shared != nil && s.opts.Shared.Shares(name) {
			// Another replica's create in flight, or its pool member, has
			// no record this replica can see yet: not an orphan.
			continue
		}
		done[sw] = true
		if err := sw.Sweep(ctx, func(id string) bool { return known[id] }); err != nil {
			s.log.Warn("sweep orphaned sandboxes", "runtime", name, "err", err)
		}
	}
}

// removeOrphans deletes sandbox directories that have no record (a crash
// during create) and leftovers of one-shot runs.
func (s *Server) removeOrphans(recs []*Record) {
	known := map[string]bool{}
	for _, r := range recs {
		known[r.ID] = true
	}
	entries, err := os.ReadDir(sandboxesRoot(s.opts))
	if err != nil {
		s.log.Warn("scan sandbox directories", "err", err)
	}
	for _, e := range entries {
		if !known[e.Name()] {
			s.log.Info("removing orphaned sandbox directory", "id", e.Name())
			if err := mounts.RemoveAll(s.sandboxDir(e.Name())); err != nil {
				s.log.Warn("remove orphan", "id", e.Name(), "err", err)
			}
		}
	}
	tmp := filepath.Join(s.opts.DataDir, "tmp")
	if entries, err := os.ReadDir(tmp); err == nil {
		for _, e := range entries {
			_ = os.RemoveAll(filepath.Join(tmp, e.Name()))
		}
	}
}

func (s *Server) setState(r *Record, state, reason, msg string) {
	r.State, r.Reason, r.Message = state, reason, msg
	r.LastTransitionAt = time.Now().UTC()
	if err := s.store.put(r); err != nil {
		s.log.Error("persist sandbox", "id", r.ID, "err", err)
	}
}

// destroy removes a sandbox completely: live instance, backend state,
// directory, record.
func (s *Server) destroy(ctx context.Context, r *Record) error {
	if s.opts.Shared != nil && !s.store.isShared(r) && !s.store.hasLocal(r.ID) {
		// The copy of another replica's sandbox, lost with it (forward
		// sends everything else to the owner): only the copy goes; its
		// directory and volumes were that replica's.
		return s.store.delete(r)
	}
	sb, eg := s.detach(r.ID)
	if sb != nil {
		discard(sb)
		_ = sb.Close(ctx)
	}
	if eg != nil {
		_ = eg.Close()
	}
	var errs []error
	if rt, ok := s.opts.Runtimes.Get(r.Runtime); ok {
		if err := rt.Destroy(ctx, s.spec(r)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := mounts.RemoveAll(s.sandboxDir(r.ID)); err != nil {
		errs = append(errs, err)
	}
	if err := s.store.delete(r); err != nil {
		errs = append(errs, err)
	}
	if r.Pool != "" {
		s.pools.release(r.Pool)
	}
	if err := s.releaseVolumes(r); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// reaper deletes expired sandboxes.
func (s *Server) reaper(ctx context.Context) {
	defer close(s.reaperDone)
	t := time.NewTicker(s.opts.ReapInterval)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if s.fenced() {
				continue // nothing of its own is reaped before it is sure it is its own
			}
			s.reapOnce(ctx)
			if n%sweepEvery == 0 {
				s.sweepReplicas(ctx)
			}
		}
	}
}

func (s *Server) reapOnce(ctx context.Context) {
	recs, err := s.reapable(ctx)
	if err != nil {
		s.log.Error("reaper: list", "err", err)
		return
	}
	now := time.Now()
	for _, r := range recs {
		if r.ExpiresAt == nil || now.Before(*r.ExpiresAt) {
			continue
		}
		unlock := s.lock(r.ID)
		cur, err := s.store.get(r.ID)
		if err == nil && cur.ExpiresAt != nil && !now.Before(*cur.ExpiresAt) {
			s.log.Info("reaper: sandbox expired", "id", r.ID)
			if err := s.destroy(ctx, cur); err != nil {
				s.log.Warn("reaper: delete", "id", r.ID, "err", err)
			}
		}
		unlock()
	}
}

// newID returns a UUID v4 string.
func newID() string { return uuid.NewString() }

func newToken() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func constantTimeEqual(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
