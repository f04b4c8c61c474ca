package egress

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// plainTrust decides whether a plaintext HTTP request for host, which has a
// credential binding, may get its credential on its way to dst (the
// connection's original destination). Nothing authenticates a plaintext
// upstream and the Host header is the workload's to set, so the credential
// is added only when:
//   - host is dst's address itself, or
//   - the sandbox's own resolver answered host with dst's address (the
//     answer has not expired), or
//   - an explicit IP or CIDR rule of the sandbox's policy allows dst's
//     address: the user has said that address is trusted.
//
// Otherwise the connection is spliced without credentials; the error says
// why, and the same words go to the sandbox's diagnostics events.
//
// OpenSandbox injects whatever address the request goes to; refusing is a
// deliberate divergence (docs/egress.md).
func (s *Controller) plainTrust(host string, dst netip.AddrPort) error {
	if s.resolvesTo(host, dst) {
		return nil
	}
	a := dst.Addr().Unmap()
	if d := s.Policy().Addr(a); d.Index >= 0 && d.Allow {
		s.events.add("credential-proxy: %s for %s at %s: credential added: %s is %s", "plaintext HTTP", host, dst, a, d.Reason())
		return nil
	}
	err := fmt.Errorf("no credential added to a plaintext HTTP request for %s sent to %s: the sandbox's resolver did not answer %s with %s, "+
		"and no IP or CIDR rule of its policy allows %s (a Host header is the workload's to set; "+
		"add a rule allowing %s to trust that address)", host, dst, host, a, a, a)
	s.events.add("credential-proxy: %v", err)
	return err
}

// Bounds of a sandbox's diagnostics events.
const (
	maxEvents    = 256
	maxEventLine = 1024
)

// eventLog keeps a sandbox's latest diagnostics events, one line each,
// oldest first. The zero value is ready to use.
type eventLog struct {
	mu      sync.Mutex
	lines   []string
	dropped int
}

// add records one event, timestamped, dropping the oldest beyond maxEvents.
func (l *eventLog) add(format string, a ...any) {
	line := time.Now().UTC().Format(time.RFC3339) + " network " + fmt.Sprintf(format, a...)
	line = strings.ReplaceAll(line, "\n", " ")
	if len(line) > maxEventLine {
		line = line[:maxEventLine]
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == maxEvents {
		l.lines = append(l.lines[:0], l.lines[1:]...)
		l.dropped++
	}
	l.lines = append(l.lines, line)
}

// Events returns the sandbox's latest network diagnostics events (oldest
// first) and how many older ones were dropped. Today they say why a
// credential was or was not added to a plaintext request.
func (s *Controller) Events() (lines []string, dropped int) {
	s.events.mu.Lock()
	defer s.events.mu.Unlock()
	return append([]string(nil), s.events.lines...), s.events.dropped
}
