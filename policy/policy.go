// Package policy is hybox's egress policy model (PROTOCOL.md section 4): the
// JSON document a client sends, its validation and normalization, the PATCH
// and DELETE edits of the egress API, and Compiled, an immutable matcher that
// decides a host name or an IP address without allocating. The first
// matching rule wins; a policy whose defaultAction is unset denies.
package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// Action is what a rule (or the default) does with matching traffic.
type Action = api.PolicyAction

// The two actions.
const (
	Allow = api.PolicyActionAllow
	Deny  = api.PolicyActionDeny
)

// MaxRules is the largest number of egress rules a policy may hold.
const MaxRules = 4096

// Rule is one egress rule (the wire type EgressRule). Target is an exact
// domain ("example.com"), a wildcard ("*.example.com": subdomains at any
// depth, not the apex), an IPv4 or IPv6 address, or a CIDR.
type Rule = api.EgressRule

// Policy is an egress policy as clients send it (the wire type
// NetworkPolicy): DefaultAction applies when no rule matches (empty means
// Deny); Egress is the ordered rule list, and the first match wins. Its zero
// value denies everything. Use Parse or Normalize to get a validated,
// normalized copy, whose Egress is never nil.
type Policy = api.NetworkPolicy

// ErrInvalid is matched (errors.Is) by every validation error of this
// package, so callers can map it to a 400 in one place.
var ErrInvalid = fmt.Errorf("invalid egress policy: %w", errdefs.ErrInvalid)

// InvalidError describes why a policy or rule list was refused. Its message
// names the offending field and value, e.g.
// `egress[2].target "exa mple.com": not a domain, wildcard, IP or CIDR`.
type InvalidError struct {
	// Field is the JSON path of the bad value ("egress[2].target",
	// "defaultAction"); empty for errors about the document as a whole.
	Field string
	// Value is the offending value as received.
	Value string
	// Reason says what is wrong with it.
	Reason string
	// Err is the underlying error (a JSON syntax error), if any.
	Err error

	quoteValue bool
}

// Error implements error.
func (e *InvalidError) Error() string {
	switch {
	case e.Field == "":
		return e.Reason
	case e.quoteValue:
		return e.Field + " " + strconv.Quote(e.Value) + ": " + e.Reason
	default:
		return e.Field + ": " + e.Reason
	}
}

// Is reports whether target is ErrInvalid.
func (e *InvalidError) Is(target error) bool {
	return target == ErrInvalid || target == errdefs.ErrInvalid
}

// Unwrap returns the underlying error, if any.
func (e *InvalidError) Unwrap() error { return e.Err }

func invalidValue(field, value, reason string) *InvalidError {
	return &InvalidError{Field: field, Value: value, Reason: reason, quoteValue: true}
}

// Parse decodes a policy document and returns it validated and normalized
// (see Normalize). Unknown fields are ignored.
//
// # Errors
// An *InvalidError (matching ErrInvalid) for malformed JSON or an invalid
// field; its message names the rule index and the value.
func Parse(data []byte) (Policy, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return Policy{}, &InvalidError{Reason: "egress policy: empty document"}
	}
	var p Policy
	if err := json.Unmarshal(data, &p); err != nil {
		return Policy{}, &InvalidError{Reason: "egress policy: " + errdefs.DescribeJSON(err), Err: err}
	}
	return Normalize(p)
}

// ParseRules decodes a JSON array of rules (the body of PATCH /policy) and
// returns them validated and normalized.
//
// # Errors
// An *InvalidError (matching ErrInvalid) for malformed JSON, more than
// MaxRules rules, or an invalid rule ("rules[1].action ...").
func ParseRules(data []byte) ([]Rule, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || trimmed[0] != '[' {
		return nil, &InvalidError{Reason: "egress rules: want a JSON array of rules"}
	}
	var rules []Rule
	if err := json.Unmarshal(trimmed, &rules); err != nil {
		return nil, &InvalidError{Reason: "egress rules: " + errdefs.DescribeJSON(err), Err: err}
	}
	return normalizeRules(rules, "rules")
}

// Normalize validates p and returns a normalized copy: actions and domains
// lowercased, a trailing dot dropped, IPs and CIDRs in canonical form
// (IPv4-mapped IPv6 written as IPv4, CIDR host bits cleared) and an empty
// DefaultAction set to Deny. Normalizing a normalized policy is a no-op.
//
// # Errors
// An *InvalidError (matching ErrInvalid) naming the first bad field.
func Normalize(p Policy) (Policy, error) {
	def, ok := parseAction(string(p.DefaultAction))
	if !ok {
		return Policy{}, invalidValue("defaultAction", string(p.DefaultAction), `must be "allow" or "deny"`)
	}
	if p.DefaultAction == "" {
		def = Deny
	}
	rules, err := normalizeRules(p.Egress, "egress")
	if err != nil {
		return Policy{}, err
	}
	return Policy{DefaultAction: def, Egress: rules}, nil
}

// normalizeRules validates and normalizes rules into a new, non-nil slice;
// field prefixes error messages ("egress" → "egress[3].target").
func normalizeRules(rules []Rule, field string) ([]Rule, error) {
	if len(rules) > MaxRules {
		return nil, &InvalidError{Field: field,
			Reason: fmt.Sprintf("%d rules, more than the limit of %d", len(rules), MaxRules)}
	}
	out := make([]Rule, len(rules))
	for i, r := range rules {
		a, ok := parseAction(string(r.Action))
		if !ok || r.Action == "" {
			reason := `must be "allow" or "deny"`
			if r.Action == "" {
				reason = `missing; must be "allow" or "deny"`
			}
			return nil, invalidValue(fmt.Sprintf("%s[%d].action", field, i), string(r.Action), reason)
		}
		t, reason := parseTarget(r.Target)
		if reason != "" {
			return nil, invalidValue(fmt.Sprintf("%s[%d].target", field, i), r.Target, reason)
		}
		out[i] = Rule{Action: a, Target: t.text}
	}
	return out, nil
}

// parseAction accepts "allow"/"deny" in any case, and "" (reported as ok
// with an empty Action so callers choose what unset means).
func parseAction(s string) (Action, bool) {
	switch {
	case s == "":
		return "", true
	case strings.EqualFold(s, string(Allow)):
		return Allow, true
	case strings.EqualFold(s, string(Deny)):
		return Deny, true
	}
	return "", false
}

// Patch returns p with rules put in front, in order, so they take priority
// over the existing ones (PATCH /policy). An existing rule whose target
// equals a new rule's target is removed from its old place; when rules
// repeats a target, its first occurrence is kept. Targets are compared
// normalized. p and rules are not modified. Patch does not validate: call
// Normalize or Compile on the result (it may exceed MaxRules).
func Patch(p Policy, rules []Rule) Policy {
	seen := make(map[string]struct{}, len(rules))
	out := make([]Rule, 0, len(rules)+len(p.Egress))
	for _, r := range rules {
		k := TargetKey(r.Target)
		if _, dup := seen[k]; dup {
			continue
		}
		seen[k] = struct{}{}
		out = append(out, r)
	}
	for _, r := range p.Egress {
		if _, replaced := seen[TargetKey(r.Target)]; !replaced {
			out = append(out, r)
		}
	}
	return Policy{DefaultAction: p.DefaultAction, Egress: out}
}

// Remove returns p without the rules whose target is one of targets
// (DELETE /policy). Targets are compared normalized, so "Example.COM." removes
// "example.com". Unknown targets are ignored; p is not modified.
func Remove(p Policy, targets []string) Policy {
	drop := make(map[string]struct{}, len(targets))
	for _, t := range targets {
		drop[TargetKey(t)] = struct{}{}
	}
	out := make([]Rule, 0, len(p.Egress))
	for _, r := range p.Egress {
		if _, gone := drop[TargetKey(r.Target)]; !gone {
			out = append(out, r)
		}
	}
	return Policy{DefaultAction: p.DefaultAction, Egress: out}
}

// TargetKey is the form under which two targets are the same rule target:
// the normalized target when it is valid, else the target trimmed,
// lowercased and without a trailing dot.
func TargetKey(target string) string {
	if t, reason := parseTarget(target); reason == "" {
		return t.text
	}
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(target)), ".")
}
