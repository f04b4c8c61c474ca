package egress

import (
	"context"
	"net/netip"
	"strings"
	"time"

	"github.com/hybox-dev/hybox/policy"
	"github.com/hybox-dev/hybox/policy/dnsproxy"
	"github.com/hybox-dev/hybox/policy/nft"
)

// Under a default that allows, a domain deny rule alone would stop only
// the sandbox's own resolver: a workload that learns the address another
// way (DNS over HTTPS to an allowed server, a hard-coded address) could
// connect to it. So the server resolves the names the policy denies and
// blocks their addresses too: the exact names of deny rules as soon as the
// policy is set, and again before their answers expire; names a wildcard
// denies when the sandbox asks for one. Blocked addresses are rejected
// after the IP rules (an IP rule that allows an address wins) and before
// everything else, for containers (nft blocked sets) and wasm guests (Do).
// Under a default that denies, nothing is blocked: an address is reached
// only through an allowed name or an IP rule.

// Bounds of blocking.
const (
	// minBlockTTL is the shortest time a denied name's address stays
	// blocked; the name is resolved again before it expires.
	minBlockTTL = time.Minute
	// maxBlockRefresh is the longest wait between resolutions.
	maxBlockRefresh = 5 * time.Minute
	// blockRetry is the wait after a failed resolution.
	blockRetry = 10 * time.Second
	// blockLookupTimeout bounds one resolution.
	blockLookupTimeout = 5 * time.Second
	// maxBlocked bounds the blocked addresses of one sandbox.
	maxBlocked = 1 << 14
	// maxOnDemand bounds resolutions of denied names in flight.
	maxOnDemand = 4
)

type blockedAddr struct {
	name    string
	expires time.Time
}

// blocking reports whether c needs the addresses of the names it denies
// blocked: it allows by default and has name rules.
func blocking(c *policy.Compiled) bool {
	return c != nil && c.DefaultAllow() && c.HasNameRules()
}

// deniedNames are the exact names of c's deny rules that c denies (a
// wildcard allow placed before may cover one).
func deniedNames(c *policy.Compiled) []string {
	var out []string
	for _, r := range c.Policy().Egress {
		t := r.Target
		if r.Action != policy.Deny || strings.HasPrefix(t, "*.") {
			continue
		}
		if _, err := netip.ParsePrefix(t); err == nil {
			continue
		}
		if _, err := netip.ParseAddr(t); err == nil {
			continue
		}
		if !c.Name(t).Allow {
			out = append(out, t)
		}
	}
	return out
}

// blockedBy returns the denied name a is blocked for, if any.
func (s *Controller) blockedBy(a netip.Addr) (string, bool) {
	s.blockMu.Lock()
	defer s.blockMu.Unlock()
	b, ok := s.blocked[a.Unmap()]
	if !ok || !time.Now().Before(b.expires) {
		return "", false
	}
	return b.name, true
}

// blockedEntriesLocked are the blocked addresses to keep under c (names it
// still denies, answers not expired); the others are forgotten. s.mu is
// held.
func (s *Controller) blockedEntriesLocked(c *policy.Compiled) []nft.Entry {
	s.blockMu.Lock()
	defer s.blockMu.Unlock()
	if !blocking(c) {
		clear(s.blocked)
		clear(s.resolved)
		return nil
	}
	now := time.Now()
	var out []nft.Entry
	for a, b := range s.blocked {
		if !now.Before(b.expires) || c.Name(b.name).Allow {
			delete(s.blocked, a)
			continue
		}
		out = append(out, nft.Entry{Addr: a, TTL: b.expires.Sub(now)})
	}
	return out
}

// block records addrs as the addresses of the denied name for ttl (at
// least minBlockTTL), adds them to the firewall, and cuts the established
// connections to those that were not blocked yet.
func (s *Controller) block(name string, addrs []netip.Addr, ttl time.Duration) {
	if len(addrs) == 0 {
		return
	}
	ttl = max(ttl, minBlockTTL)
	exp := time.Now().Add(ttl)
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.Policy()
	if s.closed || !blocking(c) || c.Name(name).Allow {
		return
	}
	fresh := map[netip.Addr]bool{}
	s.blockMu.Lock()
	for _, a := range addrs {
		a = a.Unmap()
		old, ok := s.blocked[a]
		if !ok && len(s.blocked) >= maxBlocked {
			continue
		}
		if !ok || !time.Now().Before(old.expires) {
			fresh[a] = true
		}
		if !ok || old.expires.Before(exp) {
			s.blocked[a] = blockedAddr{name: name, expires: exp}
		}
	}
	s.resolved[name] = exp
	s.blockMu.Unlock()
	log := s.m.opts.Logger
	if s.table != nil {
		if err := s.table.Block(addrs, ttl); err != nil {
			log.Error("blocking the addresses of a denied name", "sandbox", s.id, "name", name, "err", err)
		}
	}
	if len(fresh) == 0 {
		return
	}
	log.Debug("addresses of a denied name blocked", "sandbox", s.id, "name", name, "count", len(fresh))
	if s.table != nil {
		deny := func(a netip.Addr) bool { return fresh[a] && c.Addr(a).Index < 0 }
		if _, err := s.table.Cut(deny); err != nil {
			log.Error("cutting connections to a denied name", "sandbox", s.id, "name", name, "err", err)
		}
		s.cutProxiedLocked(deny)
	}
	s.cutConns(c)
}

// startBlockingLocked starts the resolver of denied names if c needs it,
// or wakes it. s.mu is held.
func (s *Controller) startBlockingLocked(c *policy.Compiled) {
	if !blocking(c) || s.closed {
		return
	}
	if s.kick == nil {
		s.kick = make(chan struct{}, 1)
		go s.blockLoop(s.kick)
		return
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// blockLoop resolves the exact names the policy denies and blocks their
// addresses, at once, after each policy change, and before the answers
// expire, until the sandbox's controller is closed.
func (s *Controller) blockLoop(kick chan struct{}) {
	ctx := s.ctx
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-timer.C:
		}
		timer.Reset(s.resolveDenied(ctx))
	}
}

// resolveDenied resolves the policy's denied exact names, blocks their
// addresses, and returns when to do it again.
func (s *Controller) resolveDenied(ctx context.Context) time.Duration {
	c := s.Policy()
	next := maxBlockRefresh
	if !blocking(c) || s.remoted.Load() {
		// An attached controller's agent blocks in the sandbox.
		return next
	}
	for _, name := range deniedNames(c) {
		lctx, cancel := context.WithTimeout(ctx, blockLookupTimeout)
		addrs, ttl, err := dnsproxy.Lookup(lctx, s.m.dialer, s.m.opts.DNSUpstreams, name, 0)
		cancel()
		if ctx.Err() != nil {
			return next
		}
		if err != nil {
			s.m.opts.Logger.Debug("resolving a denied name", "sandbox", s.id, "name", name, "err", err)
			next = min(next, blockRetry)
			continue
		}
		s.block(name, addrs, ttl)
		if s.cfg.OnBlock != nil {
			s.cfg.OnBlock(name, addrs)
		}
		next = min(next, max(ttl, minBlockTTL)/2)
	}
	return next
}

// onDenied is told of a name the policy refused (by the sandbox's
// resolver or by Do). Under blocking, a name no deny rule names exactly (a
// wildcard's) is resolved in the background and its addresses blocked.
func (s *Controller) onDenied(name string) {
	c := s.Policy()
	if !blocking(c) || c.Name(name).Allow {
		return
	}
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	s.blockMu.Lock()
	if exp, ok := s.resolved[name]; ok && time.Until(exp) > minBlockTTL/2 {
		s.blockMu.Unlock()
		return
	}
	if len(s.resolved) >= maxBlocked {
		// A workload asking for many names: forget the expired ones, and
		// resolve no more while the map is full.
		now := time.Now()
		for n, exp := range s.resolved {
			if !now.Before(exp) {
				delete(s.resolved, n)
			}
		}
		if len(s.resolved) >= maxBlocked {
			s.blockMu.Unlock()
			return
		}
	}
	// Taken until the lookup ends: one lookup per name at a time.
	s.resolved[name] = time.Now().Add(minBlockTTL)
	s.blockMu.Unlock()
	select {
	case s.onDemand <- struct{}{}:
	default:
		s.blockMu.Lock()
		delete(s.resolved, name)
		s.blockMu.Unlock()
		return
	}
	go func() {
		defer func() { <-s.onDemand }()
		ctx, cancel := context.WithTimeout(s.ctx, blockLookupTimeout)
		defer cancel()
		addrs, ttl, err := dnsproxy.Lookup(ctx, s.m.dialer, s.m.opts.DNSUpstreams, name, 0)
		if err != nil {
			s.blockMu.Lock()
			delete(s.resolved, name)
			s.blockMu.Unlock()
			return
		}
		s.block(name, addrs, ttl)
		if s.cfg.OnBlock != nil {
			s.cfg.OnBlock(name, addrs)
		}
	}()
}
