package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/hybox-dev/hybox/internal/mounts"
	"github.com/hybox-dev/hybox/policy/egress"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// extensionPoolRef names the pool a create claims from (OpenSandbox's key).
const extensionPoolRef = "poolRef"

// poolNameRE is the form of a pool name (a DNS label, as OpenSandbox's).
var poolNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// poolSet keeps the server's warm pools: their definitions, their idle
// members, and one filler goroutine that starts members in the background,
// one at a time and only while no cold create is in flight, so that
// refilling never competes with the sandboxes users are waiting for.
type poolSet struct {
	s     *Server
	mu    sync.Mutex
	pools map[string]*pool
	// creates counts cold creates in flight; the filler waits for zero.
	creates atomic.Int32
	wake    chan struct{}
	stop    context.CancelFunc
	done    chan struct{}
	// lastSync is when the shared pool definitions were last read.
	lastSync time.Time
	// reserved holds when each shared member was first found reserved
	// by a claim (staleReservation).
	reserved map[string]time.Time
}

// pool is one pool and its members.
type pool struct {
	def       api.CreatePoolRequest
	source    api.PoolSource
	createdAt time.Time
	rt        runtimes.Runtime
	pooler    runtimes.Pooler
	mem, cpu  int64
	idle      []*member // oldest first
	allocated int       // sandboxes claimed from it that still exist
	starting  int
	startWG   sync.WaitGroup
	filling   bool // started below its low mark, until it reaches its high one
	lastErr   string
	failures  int
	retryAt   time.Time
	deleted   bool
	// shared: the pool's runtime keeps its sandboxes in the shared store,
	// and so the pool its members (sharedpools.go). idle then holds the
	// handles this replica has of them, and allocated, sharedIdle and
	// sharedStarting are the store's counts as last read.
	shared                     bool
	sharedIdle, sharedStarting int
}

// member is an idle pool member, persisted in bucketMembers.
type member struct {
	ID          string    `json:"id"`
	Pool        string    `json:"pool"`
	Runtime     string    `json:"runtime"`
	Image       string    `json:"image"`
	MemoryBytes int64     `json:"memoryBytes,omitempty"`
	CPUMillis   int64     `json:"cpuMillis,omitempty"`
	CreatedAt   time.Time `json:"createdAt"`
	// Replica made the member and Ready says its sandbox is up (members
	// of shared pools, whose records another replica reads).
	Replica string `json:"replica,omitempty"`
	Ready   bool   `json:"ready,omitempty"`

	sb runtimes.Sandbox
}

func (m *member) spec(s *Server) runtimes.Spec {
	return runtimes.Spec{ID: m.ID, Image: m.Image, MemoryBytes: m.MemoryBytes, CPUMillis: m.CPUMillis,
		Extensions: map[string]string{runtimes.ExtensionRuntime: m.Runtime}, Dir: s.sandboxDir(m.ID)}
}

func newPoolSet(s *Server) *poolSet {
	return &poolSet{s: s, pools: map[string]*pool{}, wake: make(chan struct{}, 1), stop: func() {}, done: make(chan struct{})}
}

// load defines the configured pools and those created through the API,
// re-attaches the members that survived a restart and destroys the others
// (their pool is gone, or a claim of theirs had begun). A pool that
// cannot be defined (its image is missing, its runtime is off) is logged
// and skipped: the server starts without it.
func (ps *poolSet) load(ctx context.Context, configured []api.CreatePoolRequest, members []*member, recs []*Record) {
	s := ps.s
	stored, err := s.store.listPools()
	if err != nil {
		s.log.Error("read pools", "err", err)
	}
	if s.opts.Shared != nil {
		sctx, cancel := sharedCtx()
		defs, err := s.opts.Shared.Pools(sctx)
		cancel()
		if err != nil {
			s.log.Error("read the shared pools", "err", err)
		}
		for _, b := range defs {
			var def api.CreatePoolRequest
			if err := json.Unmarshal(b, &def); err != nil {
				s.log.Error("unreadable shared pool definition", "err", err)
				continue
			}
			stored = append(stored, def)
		}
		ps.lastSync = time.Now()
	}
	for _, set := range []struct {
		defs   []api.CreatePoolRequest
		source api.PoolSource
	}{{configured, api.PoolSourceConfig}, {stored, api.PoolSourceAPI}} {
		for _, def := range set.defs {
			if _, dup := ps.pools[def.Name]; dup {
				s.log.Error("pool defined twice (in the configuration file, or there and through the API); the first is kept", "pool", def.Name)
				continue
			}
			p, err := ps.define(ctx, def, set.source)
			if err != nil {
				s.log.Error("pool not started", "pool", def.Name, "err", err)
				continue
			}
			if p.shared && set.source == api.PoolSourceAPI && s.store.hasPool(def.Name) {
				// Made through this replica's API before its runtime's pools
				// were shared: the shared store holds it from now on.
				if err := ps.putSharedPool(def, true); err != nil && !errors.Is(err, errdefs.ErrConflict) {
					s.log.Error("pool not moved to the shared store", "pool", def.Name, "err", err)
					continue
				}
				_ = s.store.deletePool(def.Name)
			}
			ps.pools[def.Name] = p
		}
	}
	claimed := map[string]bool{}
	for _, r := range recs {
		claimed[r.ID] = true
		if p := ps.pools[r.Pool]; p != nil {
			p.allocated++
		}
	}
	for _, m := range members {
		if claimed[m.ID] {
			// Claimed, and the server stopped before it forgot the member
			// (a shared record is written first): the sandbox is in use.
			if err := s.store.deleteKey(bucketMembers, m.ID); err != nil {
				s.log.Warn("forget claimed pool member", "id", m.ID, "err", err)
			}
			continue
		}
		p := ps.pools[m.Pool]
		if p == nil || p.shared || p.rt.Name() != m.Runtime || p.def.Template.Image.URI != m.Image || p.mem != m.MemoryBytes || p.cpu != m.CPUMillis {
			s.log.Info("removing pool member of a pool that is gone or changed", "id", m.ID, "pool", m.Pool)
			ps.destroyMember(ctx, m)
			continue
		}
		sb, err := p.pooler.RestoreWarm(ctx, m.spec(s))
		if err != nil {
			s.log.Info("removing pool member that cannot be reused", "id", m.ID, "pool", m.Pool, "err", err)
			ps.destroyMember(ctx, m)
			continue
		}
		m.sb = sb
		p.idle = append(p.idle, m)
	}
	for _, p := range ps.pools {
		sort.Slice(p.idle, func(i, j int) bool { return p.idle[i].CreatedAt.Before(p.idle[j].CreatedAt) })
	}
}

// define checks a pool definition and resolves its runtime and limits.
//
// # Errors
// 400 naming what is wrong: the name, the capacity, the image (not
// present), the runtime (not a container runtime of this server).
func (ps *poolSet) define(ctx context.Context, def api.CreatePoolRequest, source api.PoolSource) (*pool, error) {
	if !poolNameRE.MatchString(def.Name) || len(def.Name) > 63 {
		return nil, badRequest(fmt.Sprintf("pool name %q: want a DNS label (lower-case letters, digits and '-', at most 63)", def.Name))
	}
	if err := checkCapacity(def.CapacitySpec); err != nil {
		return nil, err
	}
	t := def.Template
	t.Image.URI = strings.TrimSpace(t.Image.URI)
	def.Template = t
	if t.Image.URI == "" {
		return nil, badRequest("template.image.uri is required")
	}
	if t.MaxIdleSeconds < 0 {
		return nil, badRequest("template.maxIdleSeconds must not be negative")
	}
	spec := runtimes.Spec{Image: t.Image.URI, Extensions: map[string]string{}}
	if t.Runtime != "" {
		spec.Extensions[runtimes.ExtensionRuntime] = t.Runtime
	}
	rt, err := ps.s.opts.Runtimes.Select(spec)
	if err != nil {
		return nil, err
	}
	pooler, ok := rt.(runtimes.Pooler)
	if !ok {
		return nil, badRequest(fmt.Sprintf("runtime %s keeps no warm pools (container runtimes do; wasm sandboxes start in milliseconds anyway)", rt.Name()))
	}
	p := &pool{def: def, source: source, createdAt: time.Now().UTC(), rt: rt, pooler: pooler,
		shared: ps.s.store.sharesRuntime(rt.Name())}
	for k, v := range t.ResourceLimits {
		switch k {
		case "memory":
			if p.mem, err = ParseQuantityBytes(v); err != nil {
				return nil, badRequest("template.resourceLimits.memory: " + err.Error())
			}
		case "cpu":
			if p.cpu, err = ParseCPUMillis(v); err != nil {
				return nil, badRequest("template.resourceLimits.cpu: " + err.Error())
			}
		default:
			return nil, badRequest(fmt.Sprintf("template.resourceLimits: %q is not a limit hybox sets (cpu, memory)", k))
		}
	}
	if ps.s.opts.Images == nil {
		// No image store here (Pods on a cluster: the images are on its
		// nodes): a missing image is the first member's error (lastError).
		return p, nil
	}
	if _, err := ps.s.opts.Images.Get(ctx, t.Image.URI); err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil, badRequest(fmt.Sprintf("pool %s: %v", def.Name, err))
		}
		return nil, err
	}
	return p, nil
}

func checkCapacity(c api.PoolCapacitySpec) error {
	switch {
	case c.BufferMin < 0 || c.BufferMax < 0 || c.PoolMin < 0 || c.PoolMax < 0:
		return badRequest("capacitySpec: the counts must not be negative")
	case c.BufferMax > 256 || c.PoolMax > 4096:
		return badRequest("capacitySpec: at most 256 idle members (bufferMax) and 4096 in all (poolMax)")
	case c.BufferMin > c.BufferMax:
		return badRequest(fmt.Sprintf("capacitySpec: bufferMin %d is more than bufferMax %d", c.BufferMin, c.BufferMax))
	case c.BufferMax > c.PoolMax:
		return badRequest(fmt.Sprintf("capacitySpec: bufferMax %d is more than poolMax %d", c.BufferMax, c.PoolMax))
	case c.PoolMin > c.PoolMax:
		return badRequest(fmt.Sprintf("capacitySpec: poolMin %d is more than poolMax %d", c.PoolMin, c.PoolMax))
	}
	return nil
}

// start runs the filler until close.
func (ps *poolSet) start() {
	ctx, cancel := context.WithCancel(context.Background())
	ps.stop = cancel
	go ps.run(ctx)
	ps.kick()
}

// close stops the filler (a member being started is removed); idle
// members keep running and are re-attached at the next start.
func (ps *poolSet) close(ctx context.Context) {
	ps.stop()
	<-ps.done
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.pools {
		for _, m := range p.idle {
			_ = m.sb.Close(ctx)
		}
	}
}

func (ps *poolSet) kick() {
	select {
	case ps.wake <- struct{}{}:
	default:
	}
}

func (ps *poolSet) run(ctx context.Context) {
	defer close(ps.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if !ps.step(ctx) {
			select {
			case <-ctx.Done():
				return
			case <-ps.wake:
			case <-t.C:
			}
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// step does one piece of the filler's work (recycle or start one member)
// and reports whether it did any.
func (ps *poolSet) step(ctx context.Context) bool {
	if ps.creates.Load() > 0 {
		return false // woken again when the last create ends
	}
	now := time.Now()
	ps.mu.Lock()
	names := ps.sortedNames()
	// Old and surplus idle members go first.
	for _, n := range names {
		p := ps.pools[n]
		if p.shared {
			continue
		}
		maxIdle := time.Duration(p.def.Template.MaxIdleSeconds) * time.Second
		if len(p.idle) > p.def.CapacitySpec.BufferMax || (len(p.idle) > 0 && maxIdle > 0 && now.Sub(p.idle[0].CreatedAt) > maxIdle) {
			m := p.idle[0]
			p.idle = p.idle[1:]
			ps.mu.Unlock()
			ps.s.log.Debug("recycling pool member", "pool", n, "id", m.ID)
			ps.destroyMember(ctx, m)
			return true
		}
	}
	var p *pool
	for _, n := range names {
		if q := ps.pools[n]; !q.shared && ps.wants(q, len(q.idle)+q.starting, now) {
			p = q
			break
		}
	}
	ps.mu.Unlock()
	if p == nil {
		return ps.stepShared(ctx)
	}
	ps.startMember(ctx, p, now)
	return true
}

// sortedNames are the pools' names in order; ps.mu is held.
func (ps *poolSet) sortedNames() []string {
	names := make([]string, 0, len(ps.pools))
	for n := range ps.pools {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// wants reports whether pool q, with have members idle or starting,
// should start one more now: below its low mark it fills up to its high
// one, unless its last start failed too recently. ps.mu is held.
func (ps *poolSet) wants(q *pool, have int, now time.Time) bool {
	c := q.def.CapacitySpec
	low := max(c.BufferMin, c.PoolMin-q.allocated)
	high := min(max(c.BufferMax, low), c.PoolMax-q.allocated)
	if have < low {
		q.filling = true
	}
	if have >= high {
		q.filling = false
	}
	return q.filling && have < high && now.After(q.retryAt)
}

// startMember starts one member of p and keeps it idle.
func (ps *poolSet) startMember(ctx context.Context, p *pool, now time.Time) {
	ps.mu.Lock()
	p.starting++
	p.startWG.Add(1)
	m := &member{ID: newID(), Pool: p.def.Name, Runtime: p.rt.Name(), Image: p.def.Template.Image.URI,
		MemoryBytes: p.mem, CPUMillis: p.cpu, CreatedAt: now.UTC()}
	if p.shared {
		m.Replica = ps.s.opts.Replica
	}
	ps.mu.Unlock()

	defer p.startWG.Done()
	err := ps.warm(ctx, p, m)
	ps.mu.Lock()
	p.starting--
	unwanted := err == nil && (p.deleted || ctx.Err() != nil)
	switch {
	case err != nil:
		p.failures++
		p.lastErr = err.Error()
		p.retryAt = time.Now().Add(min(time.Second<<min(p.failures, 6), time.Minute))
		ps.s.log.Warn("pool member did not start", "pool", p.def.Name, "err", err, "retryIn", time.Until(p.retryAt).Round(time.Second))
	case unwanted:
	default:
		p.failures, p.lastErr = 0, ""
		p.idle = append(p.idle, m)
	}
	ps.mu.Unlock()
	if unwanted {
		ps.destroyMember(context.WithoutCancel(ctx), m)
	}
}

// warm starts member m of p. Its record is written first, so that a crash
// while it starts leaves something that the next start-up removes.
func (ps *poolSet) warm(ctx context.Context, p *pool, m *member) error {
	s := ps.s
	spec := m.spec(s)
	if p.shared {
		if err := ps.putSharedMember(m, true); err != nil {
			return err
		}
	} else {
		if err := os.MkdirAll(spec.Dir, 0o700); err != nil {
			return err
		}
		if err := s.store.putMember(m); err != nil {
			_ = mounts.RemoveAll(spec.Dir)
			return err
		}
	}
	// A member's container gets the egress files every sandbox has (its
	// resolv.conf) from a controller that enforces nothing; the claim
	// brings the real one.
	eg, err := s.opts.Egress.New(m.ID, egress.Config{})
	if err != nil {
		ps.destroyMember(ctx, m)
		return err
	}
	spec.Egress = eg
	sb, err := p.pooler.Warm(ctx, spec)
	_ = eg.Close()
	if err != nil {
		ps.destroyMember(context.WithoutCancel(ctx), m)
		return err
	}
	m.sb = sb
	if p.shared {
		// Claimable by every replica from now on.
		m.Ready = true
		if err := ps.putSharedMember(m, false); err != nil {
			ps.destroyMember(context.WithoutCancel(ctx), m)
			return err
		}
	}
	return nil
}

// destroyMember removes a member completely.
func (ps *poolSet) destroyMember(ctx context.Context, m *member) {
	s := ps.s
	if m.sb != nil {
		_ = m.sb.Close(ctx)
	}
	var errs []error
	if s.store.sharesRuntime(m.Runtime) {
		// Its record goes first, and only while it is still a member: one
		// a replica has claimed meanwhile is that replica's sandbox.
		mine, err := ps.forgetSharedMember(m)
		if !mine {
			return
		}
		errs = append(errs, err)
	}
	if rt, ok := s.opts.Runtimes.Get(m.Runtime); ok {
		errs = append(errs, rt.Destroy(ctx, m.spec(s)))
	}
	errs = append(errs, mounts.RemoveAll(s.sandboxDir(m.ID)))
	if !s.store.sharesRuntime(m.Runtime) {
		errs = append(errs, s.store.deleteMember(m.ID))
	}
	if err := errors.Join(errs...); err != nil {
		s.log.Warn("remove pool member", "id", m.ID, "pool", m.Pool, "err", err)
	}
}

// applyRef fills a create request from the pool it names in
// extensions.poolRef: its image when the request has none, its runtime.
func (ps *poolSet) applyRef(req *api.CreateSandboxRequest) error {
	ref := strings.TrimSpace(req.Extensions[extensionPoolRef])
	if ref == "" {
		return nil
	}
	ps.mu.Lock()
	p := ps.pools[ref]
	ps.mu.Unlock()
	if p == nil && ps.s.opts.Shared != nil {
		// Made at another replica a moment ago, perhaps.
		ctx, cancel := sharedCtx()
		err := ps.syncShared(ctx)
		cancel()
		if err != nil {
			return err
		}
		ps.mu.Lock()
		p = ps.pools[ref]
		ps.mu.Unlock()
	}
	if p == nil {
		return badRequest(fmt.Sprintf("extensions.poolRef: pool %q does not exist", ref))
	}
	if strings.TrimSpace(req.Image.URI) == "" {
		req.Image.URI = p.def.Template.Image.URI
	} else if strings.TrimSpace(req.Image.URI) != p.def.Template.Image.URI {
		return badRequest(fmt.Sprintf("extensions.poolRef: pool %s runs %s, not %s", ref, p.def.Template.Image.URI, req.Image.URI))
	}
	if rt := req.Extensions[runtimes.ExtensionRuntime]; rt == "" {
		req.Extensions[runtimes.ExtensionRuntime] = p.rt.Name()
	} else if rt != p.rt.Name() {
		return badRequest(fmt.Sprintf("extensions.poolRef: pool %s runs under %s, not %s", ref, p.rt.Name(), rt))
	}
	if len(req.Volumes) > 0 {
		return badRequest(fmt.Sprintf("extensions.poolRef: pool members cannot take volumes (a running container gets no new mounts); create without poolRef"))
	}
	return nil
}

// take hands out an idle member for rec on rt, or nil when no pool fits
// or none is idle (the create is then served cold). Members of a shared
// pool whose ids are in skip are passed over (a claim that lost one to
// another replica tries again).
func (ps *poolSet) take(ctx context.Context, rec *Record, rt runtimes.Runtime, skip map[string]bool) (*pool, *member) {
	p := ps.pick(rec, rt)
	if p == nil {
		return nil, nil
	}
	if p.shared {
		defer ps.kick()
		return p, ps.takeShared(ctx, p, skip)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	defer ps.kick()
	if len(p.idle) == 0 {
		return p, nil
	}
	m := p.idle[0]
	p.idle = p.idle[1:]
	p.allocated++
	return p, m
}

// pick finds the pool a create of rec on rt claims from: the one its
// poolRef names, else the first whose members fit it; nil when none.
func (ps *poolSet) pick(rec *Record, rt runtimes.Runtime) *pool {
	if len(rec.Volumes) > 0 {
		return nil
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var p *pool
	if ref := rec.Extensions[extensionPoolRef]; ref != "" {
		p = ps.pools[ref]
	} else {
		for _, n := range ps.sortedNames() {
			if q := ps.pools[n]; q.rt.Name() == rt.Name() && q.def.Template.Image.URI == rec.Image &&
				(q.pooler.UpdatesLimits() || (rec.MemoryBytes == q.mem && rec.CPUMillis == q.cpu)) {
				p = q
				break
			}
		}
	}
	if p == nil || p.rt.Name() != rt.Name() || p.def.Template.Image.URI != rec.Image {
		return nil
	}
	if !p.pooler.UpdatesLimits() && (rec.MemoryBytes != p.mem || rec.CPUMillis != p.cpu) {
		return nil // other limits than its members have: cold
	}
	return p
}

// release counts a sandbox claimed from pool name as gone.
func (ps *poolSet) release(name string) {
	ps.mu.Lock()
	if p := ps.pools[name]; p != nil && p.allocated > 0 {
		p.allocated--
	}
	ps.mu.Unlock()
	ps.kick()
}

// coldCreate marks a cold create in flight until the returned func runs.
func (ps *poolSet) coldCreate() func() {
	ps.creates.Add(1)
	return func() {
		if ps.creates.Add(-1) == 0 {
			ps.kick()
		}
	}
}

// claimAttempts bounds the members of a shared pool one create tries
// when other replicas claim them first.
const claimAttempts = 3

// claimFromPool serves the create of rec on rt from a pool member when one
// fits and is idle, and reports whether it answered; false means the
// create is served cold.
func (s *Server) claimFromPool(c *gin.Context, rec *Record, rt runtimes.Runtime) bool {
	skip := map[string]bool{}
	for range claimAttempts {
		p, m := s.pools.take(c.Request.Context(), rec, rt, skip)
		if m == nil {
			return false
		}
		answered, lost := s.claim(c, rec, p, m)
		if !lost {
			return answered
		}
	}
	return false
}

// claim personalises member m of p as the sandbox rec and answers the
// create. It reports false, having answered nothing, when the claim
// failed and the create must be served cold; the member is then removed,
// unless another replica claimed it first (lost: try another).
func (s *Server) claim(c *gin.Context, rec *Record, p *pool, m *member) (answered, lost bool) {
	ps := s.pools
	coldID := rec.ID
	rec.ID, rec.Pool = m.ID, p.def.Name
	unlock := s.lock(rec.ID)
	defer unlock()
	fail := func(err error) (bool, bool) {
		rec.ID, rec.Pool = coldID, ""
		if p.shared && errors.Is(err, errdefs.ErrConflict) {
			s.log.Debug("pool member claimed by another replica first", "pool", p.def.Name, "id", m.ID, "err", err)
			_ = m.sb.Close(context.Background())
			return false, true
		}
		s.log.Warn("pool claim failed; creating cold", "pool", p.def.Name, "id", m.ID, "err", err)
		ps.release(p.def.Name)
		go ps.destroyMember(context.Background(), m)
		return false, false
	}
	begin := time.Now()
	eg, err := s.newEgress(rec, true)
	if err != nil {
		// What a cold create would answer too; the member was not touched.
		rec.ID, rec.Pool = coldID, ""
		ps.mu.Lock()
		if !p.shared {
			p.allocated--
		}
		if !p.deleted {
			p.idle = append([]*member{m}, p.idle...)
		}
		ps.mu.Unlock()
		s.abortErr(c, err)
		return true, false
	}
	spec := s.spec(rec)
	spec.Egress = eg
	egressAt := time.Since(begin)
	if err := p.pooler.Claim(c.Request.Context(), m.sb, spec); err != nil {
		_ = eg.Close()
		return fail(err)
	}
	claimAt := time.Since(begin)
	s.failpoint("pool-claimed")
	rec.State, rec.LastTransitionAt = StateRunning, time.Now().UTC()
	if err := s.store.claimMember(m.ID, rec); err != nil {
		_ = eg.Close()
		return fail(err)
	}
	s.log.Debug("sandbox claimed from a pool", "id", rec.ID, "pool", p.def.Name, "egress", egressAt.Round(10*time.Microsecond),
		"claim", claimAt.Round(10*time.Microsecond), "stored", time.Since(begin).Round(10*time.Microsecond))
	s.mu.Lock()
	s.egress[rec.ID] = eg
	s.mu.Unlock()
	s.attach(rec.ID, m.sb)
	c.JSON(http.StatusAccepted, rec.wire())
	return true, false
}

// failpoint kills the server with SIGKILL at the named point when
// Options.Failpoint names it: the crash tests' way to stop at an exact
// step. It is never set in production.
func (s *Server) failpoint(name string) {
	if s.opts.Failpoint == "" || s.opts.Failpoint != name {
		return
	}
	s.log.Warn("failpoint reached: killing the server", "failpoint", name)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// wire is the API form of p.
func (ps *poolSet) wire(p *pool) api.Pool {
	idle, starting := len(p.idle), p.starting
	if p.shared {
		// The store's counts (a member starting has a record already).
		idle, starting = p.sharedIdle, p.sharedStarting
	}
	return api.Pool{Name: p.def.Name, Template: p.def.Template, CapacitySpec: p.def.CapacitySpec,
		Source: p.source, CreatedAt: p.createdAt,
		Status: api.PoolStatus{Total: idle + p.allocated, Allocated: p.allocated, Available: idle,
			Starting: starting, LastError: p.lastErr}}
}

// fresh brings the shared pools up to the shared store before a pool
// route answers (definitions made or removed at other replicas, counts).
func (s *Server) fresh(c *gin.Context) bool {
	if s.opts.Shared == nil {
		return true
	}
	ctx, cancel := sharedCtx()
	defer cancel()
	err := s.pools.syncShared(ctx)
	if err == nil {
		_, err = s.pools.refreshAll(ctx)
	}
	if err != nil {
		s.abortErr(c, err)
		return false
	}
	return true
}

func (s *Server) listPools(c *gin.Context) {
	if !s.fresh(c) {
		return
	}
	ps := s.pools
	ps.mu.Lock()
	out := api.PoolList{Items: []api.Pool{}}
	for _, p := range ps.pools {
		out.Items = append(out.Items, ps.wire(p))
	}
	ps.mu.Unlock()
	slices.SortFunc(out.Items, func(a, b api.Pool) int { return strings.Compare(a.Name, b.Name) })
	c.JSON(http.StatusOK, out)
}

func (s *Server) poolOf(c *gin.Context) (*pool, bool) {
	if !s.fresh(c) {
		return nil, false
	}
	name := c.Param("name")
	s.pools.mu.Lock()
	p := s.pools.pools[name]
	s.pools.mu.Unlock()
	if p == nil {
		s.abortErr(c, errdefs.New(api.ErrorCodeNOTFOUND, "pool %q does not exist", name))
		return nil, false
	}
	return p, true
}

func (s *Server) getPool(c *gin.Context) {
	p, ok := s.poolOf(c)
	if !ok {
		return
	}
	s.pools.mu.Lock()
	defer s.pools.mu.Unlock()
	c.JSON(http.StatusOK, s.pools.wire(p))
}

func (s *Server) createPool(c *gin.Context) {
	var req api.CreatePoolRequest
	if err := decodeBody(c, &req); err != nil {
		s.abortErr(c, err)
		return
	}
	ps := s.pools
	p, err := ps.define(c.Request.Context(), req, api.PoolSourceAPI)
	if err != nil {
		s.abortErr(c, err)
		return
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if _, dup := ps.pools[req.Name]; dup {
		s.abortErr(c, errdefs.New(api.ErrorCodeCONFLICT, "pool %q exists", req.Name))
		return
	}
	put := s.store.putPool
	if p.shared {
		put = func(def api.CreatePoolRequest) error { return ps.putSharedPool(def, true) }
	}
	if err := put(p.def); err != nil {
		s.abortErr(c, err)
		return
	}
	ps.pools[req.Name] = p
	ps.kick()
	c.JSON(http.StatusCreated, ps.wire(p))
}

func (s *Server) updatePool(c *gin.Context) {
	p, ok := s.poolOf(c)
	if !ok {
		return
	}
	var req api.UpdatePoolRequest
	if err := decodeBody(c, &req); err != nil {
		s.abortErr(c, err)
		return
	}
	if err := checkCapacity(req.CapacitySpec); err != nil {
		s.abortErr(c, err)
		return
	}
	ps := s.pools
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p.source == api.PoolSourceConfig {
		s.abortErr(c, badRequest(fmt.Sprintf("pool %s is defined in the server's configuration file; change it there", p.def.Name)))
		return
	}
	def := p.def
	def.CapacitySpec = req.CapacitySpec
	put := s.store.putPool
	if p.shared {
		put = func(def api.CreatePoolRequest) error { return ps.putSharedPool(def, false) }
	}
	if err := put(def); err != nil {
		s.abortErr(c, err)
		return
	}
	p.def = def
	ps.kick()
	c.JSON(http.StatusOK, ps.wire(p))
}

func (s *Server) deletePool(c *gin.Context) {
	p, ok := s.poolOf(c)
	if !ok {
		return
	}
	ps := s.pools
	ps.mu.Lock()
	if p.source == api.PoolSourceConfig {
		ps.mu.Unlock()
		s.abortErr(c, badRequest(fmt.Sprintf("pool %s is defined in the server's configuration file; remove it there", p.def.Name)))
		return
	}
	del := s.store.deletePool
	if p.shared {
		del = func(name string) error {
			ctx, cancel := sharedCtx()
			defer cancel()
			return sharedErr("delete pool "+name, s.opts.Shared.DeletePool(ctx, name))
		}
	}
	if err := del(p.def.Name); err != nil {
		ps.mu.Unlock()
		s.abortErr(c, err)
		return
	}
	delete(ps.pools, p.def.Name)
	p.deleted = true
	idle := p.idle
	p.idle = nil
	ps.mu.Unlock()
	// A member being started is removed by the filler when it is up.
	p.startWG.Wait()
	if p.shared {
		// Every replica's members, not only those this one holds.
		ctx, cancel := sharedCtx()
		members, _, err := ps.sharedMembers(ctx)
		cancel()
		if err != nil {
			s.log.Warn("list the members of a deleted shared pool; the leader removes them", "pool", p.def.Name, "err", err)
		}
		held := map[string]bool{}
		for _, m := range idle {
			held[m.ID] = true
		}
		for _, m := range members[p.def.Name] {
			if !held[m.ID] {
				idle = append(idle, m)
			}
		}
	}
	for _, m := range idle {
		ps.destroyMember(c.Request.Context(), m)
	}
	c.Status(http.StatusNoContent)
}
