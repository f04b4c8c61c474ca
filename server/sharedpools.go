package server

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/hybox-dev/hybox/internal/shared"
	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// Shared pools: the pools of a runtime whose sandboxes every replica
// serves (Pods on a cluster, with shared state). Their members and the
// definitions made through the API live in the shared store, so that
// every replica claims from one pool and lists the same counts, and only
// the leading replica starts and recycles members (the filler runs
// everywhere, but does that work only while this replica leads). A claim
// reserves the member at its execd, which refuses a second reservation:
// of two replicas that pick the same member one wins and the other tries
// the next. Each replica keeps the handles of the members it started or
// has looked at (pool.idle), and drops those the store no longer lists.

// syncEvery bounds how often the filler reads the shared pool definitions.
const syncEvery = time.Second

// staleClaim is how long a member may stay reserved by a claim before it
// is taken for one that died: well past a claim's longest wait (an
// in-place resize, bounded by the backend's ready timeout).
const staleClaim = 3 * time.Minute

// staleReservation notes that member id was found reserved and reports
// whether it was found so for longer than staleClaim already.
func (ps *poolSet) staleReservation(id string) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.reserved == nil {
		ps.reserved = map[string]time.Time{}
	}
	now := time.Now()
	for k, t := range ps.reserved {
		if now.Sub(t) > 2*staleClaim {
			delete(ps.reserved, k) // claimed or removed since
		}
	}
	first, seen := ps.reserved[id]
	if !seen {
		ps.reserved[id] = now
		return false
	}
	return now.Sub(first) > staleClaim
}

// sharedMembers reads the members of every shared pool, by pool, oldest
// first, and how many sandboxes claimed from each still exist.
func (ps *poolSet) sharedMembers(ctx context.Context) (map[string][]*member, map[string]int, error) {
	sh := ps.s.opts.Shared
	ms, err := sh.Members(ctx, "")
	if err != nil {
		return nil, nil, sharedErr("list pool members", err)
	}
	members := map[string][]*member{}
	for _, sm := range ms {
		m := &member{}
		if err := json.Unmarshal(sm.Data, m); err != nil {
			ps.s.log.Warn("unreadable shared pool member", "id", sm.ID, "err", err)
			continue
		}
		m.ID, m.Pool = sm.ID, sm.Pool
		members[m.Pool] = append(members[m.Pool], m)
	}
	for _, l := range members {
		slices.SortFunc(l, func(a, b *member) int { return a.CreatedAt.Compare(b.CreatedAt) })
	}
	recs, err := sh.List(ctx)
	if err != nil {
		return nil, nil, sharedErr("list", err)
	}
	allocated := map[string]int{}
	for _, sr := range recs {
		var r struct {
			Pool string `json:"pool"`
		}
		if json.Unmarshal(sr.Data, &r) == nil && r.Pool != "" {
			allocated[r.Pool]++
		}
	}
	return members, allocated, nil
}

// refresh brings shared pool p's counts and handles up to the store's
// members ms: handles of members no longer listed are dropped (claimed
// elsewhere, or removed).
func (ps *poolSet) refresh(p *pool, ms []*member, allocated int) {
	listed := map[string]*member{}
	for _, m := range ms {
		listed[m.ID] = m
	}
	var keep []*member
	for _, m := range p.idle {
		if l := listed[m.ID]; l != nil {
			m.Ready = l.Ready
			keep = append(keep, m)
		} else if m.sb != nil {
			_ = m.sb.Close(context.Background())
		}
	}
	p.idle = keep
	p.sharedIdle, p.sharedStarting, p.allocated = 0, 0, allocated
	for _, m := range ms {
		if m.Ready {
			p.sharedIdle++
		} else {
			p.sharedStarting++
		}
	}
}

// refreshAll reads the shared store and refreshes every shared pool.
func (ps *poolSet) refreshAll(ctx context.Context) (map[string][]*member, error) {
	members, allocated, err := ps.sharedMembers(ctx)
	if err != nil {
		return nil, err
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for n, p := range ps.pools {
		if p.shared {
			ps.refresh(p, members[n], allocated[n])
		}
	}
	return members, nil
}

// syncShared defines the shared pools made through the API at another
// replica, forgets those deleted there and takes their new capacities.
func (ps *poolSet) syncShared(ctx context.Context) error {
	s := ps.s
	if s.opts.Shared == nil {
		return nil
	}
	defs, err := s.opts.Shared.Pools(ctx)
	if err != nil {
		return sharedErr("list pools", err)
	}
	ps.mu.Lock()
	ps.lastSync = time.Now()
	var dropped []*pool
	for n, p := range ps.pools {
		if _, ok := defs[n]; !ok && p.shared && p.source == api.PoolSourceAPI {
			delete(ps.pools, n)
			p.deleted = true
			dropped = append(dropped, p)
		}
	}
	var fresh []api.CreatePoolRequest
	for n, b := range defs {
		var def api.CreatePoolRequest
		if err := json.Unmarshal(b, &def); err != nil {
			s.log.Warn("unreadable shared pool definition", "pool", n, "err", err)
			continue
		}
		if p := ps.pools[n]; p != nil {
			if p.shared && p.source == api.PoolSourceAPI {
				p.def.CapacitySpec = def.CapacitySpec
			}
			continue
		}
		fresh = append(fresh, def)
	}
	ps.mu.Unlock()
	for _, p := range dropped {
		p.startWG.Wait()
		ps.mu.Lock()
		idle := p.idle
		p.idle = nil
		ps.mu.Unlock()
		for _, m := range idle {
			if m.sb != nil {
				_ = m.sb.Close(ctx)
			}
		}
	}
	for _, def := range fresh {
		p, err := ps.define(ctx, def, api.PoolSourceAPI)
		if err != nil {
			s.log.Warn("shared pool not served by this replica", "pool", def.Name, "err", err)
			continue
		}
		ps.mu.Lock()
		if _, dup := ps.pools[def.Name]; !dup {
			ps.pools[def.Name] = p
		}
		ps.mu.Unlock()
	}
	return nil
}

// stepShared is the filler's work on the shared pools, on the leading
// replica only: recycle a member (surplus, too old, or left half-started
// by a replica that is gone) or start one. It reports whether it did any.
func (ps *poolSet) stepShared(ctx context.Context) bool {
	s := ps.s
	if s.opts.Shared == nil {
		return false
	}
	if time.Since(ps.lastSync) >= syncEvery {
		sctx, cancel := sharedCtx()
		err := ps.syncShared(sctx)
		cancel()
		if err != nil {
			s.log.Warn("read the shared pools", "err", err)
		}
	}
	if !s.opts.Shared.Leading() || !ps.hasShared() {
		return false
	}
	sctx, cancel := sharedCtx()
	defer cancel()
	members, err := ps.refreshAll(sctx)
	if err != nil {
		s.log.Warn("read the shared pool members", "err", err)
		return false
	}
	now := time.Now()
	ps.mu.Lock()
	names := ps.sortedNames()
	for _, n := range names {
		p := ps.pools[n]
		if !p.shared {
			continue
		}
		maxIdle := time.Duration(p.def.Template.MaxIdleSeconds) * time.Second
		var ready []*member
		for _, m := range members[n] {
			if m.Ready {
				ready = append(ready, m)
			}
		}
		var victim *member
		switch {
		case len(ready) > p.def.CapacitySpec.BufferMax:
			victim = ready[0]
		case len(ready) > 0 && maxIdle > 0 && now.Sub(ready[0].CreatedAt) > maxIdle:
			victim = ready[0]
		}
		if victim == nil {
			// A member still starting whose maker is gone never will.
			for _, m := range members[n] {
				if !m.Ready && m.Replica != s.opts.Replica {
					ps.mu.Unlock()
					alive, err := s.opts.Shared.Alive(sctx, m.Replica)
					if err == nil && !alive {
						s.log.Info("removing a pool member a replica that is gone left half-started", "pool", n, "id", m.ID, "replica", m.Replica)
						ps.destroyMember(ctx, ps.handle(p, m))
						return true
					}
					ps.mu.Lock()
				}
			}
			continue
		}
		ps.mu.Unlock()
		s.log.Debug("recycling pool member", "pool", n, "id", victim.ID)
		ps.destroyMember(ctx, ps.handle(p, victim))
		return true
	}
	var p *pool
	for _, n := range names {
		q := ps.pools[n]
		if !q.shared {
			continue
		}
		// Every member of the store counts, started or starting, by this
		// replica or an earlier leader: this filler starts one at a time,
		// so none of its own is in flight here.
		if ps.wants(q, len(members[n]), now) {
			p = q
			break
		}
	}
	ps.mu.Unlock()
	if p == nil {
		return false
	}
	ps.startMember(ctx, p, now)
	return true
}

func (ps *poolSet) hasShared() bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.pools {
		if p.shared {
			return true
		}
	}
	return false
}

// handle returns this replica's handle of member m of p, or m itself
// (with no sandbox) when it holds none. ps.mu is not held.
func (ps *poolSet) handle(p *pool, m *member) *member {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for i, h := range p.idle {
		if h.ID == m.ID {
			p.idle = slices.Delete(p.idle, i, i+1)
			return h
		}
	}
	return m
}

// takeShared picks an idle member of shared pool p for a claim: the oldest
// one the store lists that is not in skip and whose sandbox answers idle
// (a member this replica never held is restored first). Members whose
// sandbox is gone are removed on the way.
func (ps *poolSet) takeShared(ctx context.Context, p *pool, skip map[string]bool) *member {
	s := ps.s
	ms, err := s.opts.Shared.Members(ctx, p.def.Name)
	if err != nil {
		s.log.Warn("list pool members; creating cold", "pool", p.def.Name, "err", err)
		return nil
	}
	var cands []*member
	for _, sm := range ms {
		m := &member{}
		if json.Unmarshal(sm.Data, m) != nil || !m.Ready || skip[sm.ID] {
			continue
		}
		m.ID, m.Pool = sm.ID, sm.Pool
		cands = append(cands, m)
	}
	slices.SortFunc(cands, func(a, b *member) int { return a.CreatedAt.Compare(b.CreatedAt) })
	for _, c := range cands {
		skip[c.ID] = true
		if c.Runtime != p.rt.Name() || c.Image != p.def.Template.Image.URI || c.MemoryBytes != p.mem || c.CPUMillis != p.cpu {
			continue // of the pool as it was; the leader recycles it
		}
		m := ps.handle(p, c)
		if m.sb != nil {
			return m
		}
		sb, err := p.pooler.RestoreWarm(ctx, m.spec(s))
		if errors.Is(err, runtimes.ErrNotFound) {
			s.log.Info("removing pool member whose sandbox is gone", "pool", p.def.Name, "id", m.ID)
			go ps.destroyMember(context.WithoutCancel(ctx), m)
			continue
		}
		if errors.Is(err, errdefs.ErrConflict) && ps.staleReservation(m.ID) {
			// Reserved long ago by a claim that never finished (its
			// replica died in the middle): nobody will use it.
			s.log.Info("removing pool member whose claim never finished", "pool", p.def.Name, "id", m.ID)
			go ps.destroyMember(context.WithoutCancel(ctx), m)
			continue
		}
		if err != nil {
			// Reserved by another replica's claim in flight, most likely.
			s.log.Debug("pool member not claimable here", "pool", p.def.Name, "id", m.ID, "err", err)
			continue
		}
		m.sb = sb
		return m
	}
	return nil
}

// putSharedPool writes pool def to the shared store (create: a new one).
func (ps *poolSet) putSharedPool(def api.CreatePoolRequest, create bool) error {
	b, err := json.Marshal(def)
	if err != nil {
		return err
	}
	ctx, cancel := sharedCtx()
	defer cancel()
	err = ps.s.opts.Shared.PutPool(ctx, def.Name, b, create)
	if errors.Is(err, errdefs.ErrConflict) {
		return errdefs.New(api.ErrorCodeCONFLICT, "pool %q exists", def.Name)
	}
	return sharedErr("put pool "+def.Name, err)
}

// sharedMember is m as the shared store keeps it.
func sharedMember(m *member) (shared.Member, error) {
	b, err := json.Marshal(m)
	return shared.Member{ID: m.ID, Pool: m.Pool, Data: b}, err
}

// putSharedMember writes member m (create: its first record).
func (ps *poolSet) putSharedMember(m *member, create bool) error {
	sm, err := sharedMember(m)
	if err != nil {
		return err
	}
	ctx, cancel := sharedCtx()
	defer cancel()
	if create {
		return sharedErr("create pool member "+m.ID, ps.s.opts.Shared.CreateMember(ctx, sm))
	}
	return sharedErr("put pool member "+m.ID, ps.s.opts.Shared.PutMember(ctx, sm))
}

// forgetSharedMember removes member m's record and its sealed egress
// state; false when m has become a sandbox meanwhile (claimed at another
// replica), which must then not be destroyed.
func (ps *poolSet) forgetSharedMember(m *member) (bool, error) {
	ctx, cancel := sharedCtx()
	defer cancel()
	sh := ps.s.opts.Shared
	err := sh.DeleteMember(ctx, m.ID)
	if errors.Is(err, errdefs.ErrConflict) {
		return false, nil
	}
	if err != nil {
		return true, sharedErr("delete pool member "+m.ID, err)
	}
	// The record is gone, and ids are never reused: only the blob is left.
	return true, sharedErr("delete the egress state of "+m.ID, sh.Delete(ctx, m.ID))
}
