package hybox_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	hybox "github.com/hybox-dev/hybox/sdks/go"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

func TestEgressPolicy(t *testing.T) {
	c := newClient(t, server(t))
	ctx := ctxFor(t, time.Minute)
	sb := newSandbox(t, c, api.CreateSandboxRequest{NetworkPolicy: &api.NetworkPolicy{
		DefaultAction: api.PolicyActionDeny,
		Egress:        []api.EgressRule{hybox.Allow("example.com")},
	}})
	if _, err := sb.WaitRunning(ctx, 0); err != nil {
		t.Fatal(err)
	}
	st, err := sb.EgressPolicy(ctx)
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if st.Mode != api.PolicyStatusModeEnforcing || targets(st) != "allow example.com" {
		t.Fatalf("policy %+v", st)
	}
	st, err = sb.SetEgressPolicy(ctx, api.NetworkPolicy{DefaultAction: api.PolicyActionDeny,
		Egress: []api.EgressRule{hybox.Allow("*.example.org"), hybox.Deny("10.0.0.0/8")}})
	if err != nil || targets(st) != "allow *.example.org, deny 10.0.0.0/8" {
		t.Fatalf("set: %v %+v", err, st)
	}
	st, err = sb.PatchEgressRules(ctx, hybox.Allow("api.example.net"))
	if err != nil || targets(st) != "allow api.example.net, allow *.example.org, deny 10.0.0.0/8" {
		t.Fatalf("patch: %v %s", err, targets(st))
	}
	st, err = sb.RemoveEgressRules(ctx, "10.0.0.0/8")
	if err != nil || targets(st) != "allow api.example.net, allow *.example.org" {
		t.Fatalf("remove: %v %s", err, targets(st))
	}
	if _, err := sb.PatchEgressRules(ctx, api.EgressRule{Action: "maybe", Target: "x.com"}); !errors.Is(err, hybox.ErrInvalid) {
		t.Errorf("patch with a bad action: %v, want ErrInvalid", err)
	}
	st, err = sb.SetEgressPolicy(ctx, api.NetworkPolicy{DefaultAction: api.PolicyActionDeny})
	if err != nil || st.Mode != api.PolicyStatusModeDenyAll {
		t.Fatalf("deny all: %v %+v", err, st)
	}
}

func targets(st api.PolicyStatus) string {
	var parts []string
	for _, r := range st.Policy.Egress {
		parts = append(parts, fmt.Sprintf("%s %s", r.Action, r.Target))
	}
	return strings.Join(parts, ", ")
}

func TestCredentialVault(t *testing.T) {
	c := newClient(t, server(t))
	ctx := ctxFor(t, time.Minute)
	sb := newSandbox(t, c, api.CreateSandboxRequest{
		CredentialProxy: &api.CredentialProxy{Enabled: true},
		NetworkPolicy: &api.NetworkPolicy{DefaultAction: api.PolicyActionDeny,
			Egress: []api.EgressRule{hybox.Allow("api.example.com"), hybox.Allow("uploads.example.com")}},
	})
	if _, err := sb.WaitRunning(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Vault(ctx); !errors.Is(err, hybox.ErrNotFound) {
		t.Fatalf("vault before create: %v, want ErrNotFound", err)
	}
	const secret = "sk-live-0123456789abcdef"
	st, err := sb.CreateVault(ctx, api.VaultCreateRequest{
		Credentials: []api.VaultCredential{hybox.Inline("token", secret)},
		Bindings: []api.VaultBinding{{Name: "api", Match: api.VaultMatch{Hosts: []string{"api.example.com"}},
			Auth: api.VaultAuth{Type: api.VaultAuthTypeBearer, Credential: "token"}}},
	})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if len(st.Credentials) != 1 || st.Credentials[0].Name != "token" || len(st.Bindings) != 1 {
		t.Fatalf("state %+v", st)
	}
	if _, err := sb.CreateVault(ctx, api.VaultCreateRequest{}); !errors.Is(err, hybox.ErrConflict) {
		t.Errorf("second create: %v, want ErrConflict", err)
	}
	got, err := sb.Vault(ctx)
	if err != nil || got.Revision != st.Revision {
		t.Fatalf("get: %v %+v", err, got)
	}
	if b, _ := json.Marshal(got); strings.Contains(string(b), secret) {
		t.Fatalf("the vault state carries the secret: %s", b)
	}
	if s := fmt.Sprintf("%v %+v %#v", hybox.Inline("t", secret), hybox.Inline("t", secret), hybox.Inline("t", secret)); strings.Contains(s, secret) {
		t.Errorf("a credential prints its value: %s", s)
	}
	creds, err := sb.VaultCredentials(ctx)
	if err != nil || len(creds.Credentials) != 1 {
		t.Fatalf("credentials: %v %+v", err, creds)
	}
	cred, err := sb.VaultCredential(ctx, "token")
	if err != nil || cred.SourceType != "inline" {
		t.Fatalf("credential: %v %+v", err, cred)
	}
	binds, err := sb.VaultBindings(ctx)
	if err != nil || len(binds.Bindings) != 1 {
		t.Fatalf("bindings: %v %+v", err, binds)
	}
	bind, err := sb.VaultBinding(ctx, "api")
	if err != nil || bind.Auth == nil || bind.Auth.Type != string(api.VaultAuthTypeBearer) || bind.Match == nil || bind.Match.Hosts[0] != "api.example.com" {
		t.Fatalf("binding: %v %+v", err, bind)
	}
	if _, err := sb.VaultBinding(ctx, "nope"); !errors.Is(err, hybox.ErrNotFound) {
		t.Errorf("unknown binding: %v, want ErrNotFound", err)
	}

	rev := got.Revision
	patched, err := sb.PatchVault(ctx, api.VaultPatchRequest{ExpectedRevision: &rev,
		Credentials: &api.VaultCredentialMutations{Add: []api.VaultCredential{hybox.Inline("key2", "v2")}},
		Bindings: &api.VaultBindingMutations{Add: []api.VaultBinding{{Name: "uploads", Match: api.VaultMatch{Hosts: []string{"uploads.example.com"}},
			Auth: api.VaultAuth{Type: api.VaultAuthTypeAPIKey, Name: "X-Api-Key", Credential: "key2"}}}},
	})
	if err != nil || patched.Revision <= rev || len(patched.Credentials) != 2 || len(patched.Bindings) != 2 {
		t.Fatalf("patch: %v %+v", err, patched)
	}
	if _, err := sb.PatchVault(ctx, api.VaultPatchRequest{ExpectedRevision: &rev,
		Credentials: &api.VaultCredentialMutations{Delete: []string{"key2"}}}); !errors.Is(err, hybox.ErrConflict) {
		t.Errorf("patch at a stale revision: %v, want ErrConflict", err)
	}
	if _, err := sb.PatchVault(ctx, api.VaultPatchRequest{Bindings: &api.VaultBindingMutations{Add: []api.VaultBinding{{Name: "denied",
		Match: api.VaultMatch{Hosts: []string{"evil.example.net"}}, Auth: api.VaultAuth{Type: api.VaultAuthTypeBearer, Credential: "token"}}}}}); !errors.Is(err, hybox.ErrInvalid) {
		t.Errorf("a binding to a host the policy denies: %v, want ErrInvalid", err)
	}
	if err := sb.DeleteVault(ctx); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := sb.Vault(ctx); !errors.Is(err, hybox.ErrNotFound) {
		t.Errorf("vault after delete: %v, want ErrNotFound", err)
	}
}
