// Command egress creates a sandbox whose outbound traffic is limited to a
// few hosts, changes that policy while it runs, and gives it a credential
// that the server injects into its requests to one API, so that the code in
// the sandbox never sees the secret.
package main

import (
	"context"
	"fmt"
	"log"
	"os"

	hybox "github.com/hybox-dev/hybox/sdks/go"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	client, err := hybox.FromEnv()
	if err != nil {
		return err
	}
	sb, err := client.Create(ctx, api.CreateSandboxRequest{
		NetworkPolicy: &api.NetworkPolicy{
			DefaultAction: api.PolicyActionDeny,
			Egress:        []api.EgressRule{hybox.Allow("pypi.org"), hybox.Allow("api.github.com")},
		},
		CredentialProxy: &api.CredentialProxy{Enabled: true},
	})
	if err != nil {
		return err
	}
	defer sb.Kill(context.WithoutCancel(ctx))
	if _, err := sb.WaitRunning(ctx, 0); err != nil {
		return err
	}

	// New rules go first; removing a target removes its rule.
	if _, err := sb.PatchEgressRules(ctx, hybox.Allow("*.githubusercontent.com"), hybox.Deny("10.0.0.0/8")); err != nil {
		return err
	}
	st, err := sb.RemoveEgressRules(ctx, "pypi.org")
	if err != nil {
		return err
	}
	fmt.Printf("policy (%s, default %s):\n", st.Mode, st.Policy.DefaultAction)
	for _, r := range st.Policy.Egress {
		fmt.Printf("  %-5s %s\n", r.Action, r.Target)
	}

	// The token goes to the server once; requests from the sandbox to
	// api.github.com get "Authorization: Bearer <token>" added on the way out.
	token := os.Getenv("GITHUB_TOKEN")
	if token == "" {
		token = "example-token"
	}
	vault, err := sb.CreateVault(ctx, api.VaultCreateRequest{
		Credentials: []api.VaultCredential{hybox.Inline("github", token)},
		Bindings: []api.VaultBinding{{
			Name:  "github-api",
			Match: api.VaultMatch{Hosts: []string{"api.github.com"}},
			Auth:  api.VaultAuth{Type: api.VaultAuthTypeBearer, Credential: "github"},
		}},
	})
	if err != nil {
		return err
	}
	fmt.Printf("vault revision %d:\n", vault.Revision)
	for _, c := range vault.Credentials {
		fmt.Printf("  credential %s (%s; its value is never returned)\n", c.Name, c.SourceType)
	}
	for _, b := range vault.Bindings {
		fmt.Printf("  binding %s: %s for %v\n", b.Name, b.Auth.Type, b.Match.Hosts)
	}
	return nil
}
