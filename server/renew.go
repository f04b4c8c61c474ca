package server

import (
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Renew on access (OpenSandbox's OSEP-0009, server proxy mode): a sandbox
// created with extensions["access.renew.extend.seconds"] = N has its
// expiresAt moved to now+N when traffic reaches it through the proxy route
// or the ingress router (its execd API, the egress API, its ports).
const (
	extRenewOnAccess = "access.renew.extend.seconds"
	minRenewOnAccess = 300   // 5 minutes, as OpenSandbox
	maxRenewOnAccess = 86400 // 24 hours
	// renewSlack bounds the store writes: a renewal happens only when it
	// moves expiresAt by more than this, so a flood of requests writes the
	// record at most once a minute (OpenSandbox's default min interval),
	// and expiresAt stays within a minute of now+N while traffic lasts.
	renewSlack = time.Minute
)

// renewOnAccessOf validates the extension: absent means off; otherwise a
// base-10 integer from 300 to 86400, without sign, spaces or leading zeros.
//
// # Errors
// A 400 (INVALID_REQUEST) naming the key and the range.
func renewOnAccessOf(ext map[string]string) (time.Duration, error) {
	raw, ok := ext[extRenewOnAccess]
	if !ok {
		return 0, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || raw[0] < '1' || raw[0] > '9' {
		return 0, badRequest(fmt.Sprintf("extensions[%q]: must be a base-10 integer string between %d and %d, got %q",
			extRenewOnAccess, minRenewOnAccess, maxRenewOnAccess, raw))
	}
	if n < minRenewOnAccess || n > maxRenewOnAccess {
		return 0, badRequest(fmt.Sprintf("extensions[%q]: must be between %d and %d seconds (5 minutes to 24 hours), got %d",
			extRenewOnAccess, minRenewOnAccess, maxRenewOnAccess, n))
	}
	return time.Duration(n) * time.Second, nil
}

// renewer dedupes renewals in flight: while one request renews a sandbox,
// the others that reach it do not wait.
type renewer struct {
	mu       sync.Mutex
	inFlight map[string]bool
}

// renewOnAccess renews rec (as just read from the store) on access when it
// opted in, is Running, expires, and the renewal would move its expiry by
// more than renewSlack. It never waits for a lifecycle operation on the
// sandbox: when one holds its lock, this access renews nothing.
func (s *Server) renewOnAccess(rec *Record) {
	extend, err := renewOnAccessOf(rec.Extensions)
	if err != nil || extend == 0 || rec.ExpiresAt == nil || rec.State != StateRunning {
		return
	}
	if extend > s.opts.MaxTimeout {
		extend = s.opts.MaxTimeout
	}
	if !time.Now().Add(extend).After(rec.ExpiresAt.Add(renewSlack)) {
		return // recent enough: no write
	}
	s.renew.mu.Lock()
	if s.renew.inFlight == nil {
		s.renew.inFlight = map[string]bool{}
	}
	if s.renew.inFlight[rec.ID] {
		s.renew.mu.Unlock()
		return
	}
	s.renew.inFlight[rec.ID] = true
	s.renew.mu.Unlock()
	defer func() {
		s.renew.mu.Lock()
		delete(s.renew.inFlight, rec.ID)
		s.renew.mu.Unlock()
	}()
	mu := s.locks.of(rec.ID)
	if !mu.TryLock() {
		return // a lifecycle operation (delete, pause, renew) is under way
	}
	defer mu.Unlock()
	cur, err := s.store.get(rec.ID)
	if err != nil || cur.State != StateRunning || cur.ExpiresAt == nil {
		return
	}
	exp := time.Now().Add(extend).UTC()
	if !exp.After(cur.ExpiresAt.Add(renewSlack)) {
		return
	}
	cur.ExpiresAt = &exp
	if err := s.store.put(cur); err != nil {
		s.log.Warn("renew on access", "id", cur.ID, "err", err)
		return
	}
	s.log.Debug("renewed on access", "id", cur.ID, "expiresAt", exp)
}
