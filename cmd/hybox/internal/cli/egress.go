package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	hybox "github.com/hybox-dev/hybox/sdks/go"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

// policyFlags are the network-policy flags of `sandbox create` and of a
// one-shot `run` (which has no --credential-proxy).
type policyFlags struct {
	rules         []api.EgressRule // --allow and --deny, in command-line order
	defaultAction string
	file          string
	credProxy     bool
}

// ruleFlag is --allow or --deny: each use appends one rule to the shared
// list, so rules keep the order in which the flags were given, across both
// flags.
type ruleFlag struct {
	action api.PolicyAction
	list   *[]api.EgressRule
}

func (f ruleFlag) Set(v string) error {
	v = strings.TrimSpace(v)
	if v == "" {
		return errors.New("empty target")
	}
	*f.list = append(*f.list, api.EgressRule{Action: f.action, Target: v})
	return nil
}

func (f ruleFlag) String() string {
	var t []string
	for _, r := range *f.list {
		if r.Action == f.action {
			t = append(t, r.Target)
		}
	}
	return strings.Join(t, ",")
}

func (f ruleFlag) Type() string { return "target" }

// register adds the flags to cmd.
func (p *policyFlags) register(cmd *cobra.Command) {
	p.registerRules(cmd)
	cmd.Flags().BoolVar(&p.credProxy, "credential-proxy", false, "enable the credential vault (needs a network policy; fill it with: hybox vault create)")
}

// registerRules adds the flags that describe a policy to cmd.
func (p *policyFlags) registerRules(cmd *cobra.Command) {
	f := cmd.Flags()
	f.Var(ruleFlag{action: api.PolicyActionAllow, list: &p.rules}, "allow",
		"allow outbound traffic to TARGET: name, *.suffix, IP or CIDR (repeatable; rules keep the order of --allow and --deny, first match wins)")
	f.Var(ruleFlag{action: api.PolicyActionDeny, list: &p.rules}, "deny", "deny outbound traffic to TARGET (repeatable)")
	f.StringVar(&p.defaultAction, "default-action", "", "action for traffic no rule matches: allow or deny (default deny once a rule is given)")
	f.StringVar(&p.file, "network-policy", "", "network policy as JSON from FILE, or - for stdin (instead of --allow, --deny and --default-action)")
}

// apply puts the policy the flags describe into req. No flag leaves the
// sandbox unrestricted.
func (p *policyFlags) apply(a *app, cmd *cobra.Command, req *api.CreateSandboxRequest) error {
	if p.credProxy {
		req.CredentialProxy = &api.CredentialProxy{Enabled: true}
	}
	np, err := p.policy(a, cmd)
	req.NetworkPolicy = np
	return err
}

// policy is the policy the flags describe; nil when no flag is given.
func (p *policyFlags) policy(a *app, cmd *cobra.Command) (*api.NetworkPolicy, error) {
	ruled := len(p.rules) > 0 || cmd.Flags().Changed("default-action")
	if cmd.Flags().Changed("network-policy") {
		if ruled {
			return nil, usagef(cmd, "--network-policy cannot be combined with --allow, --deny or --default-action")
		}
		var np api.NetworkPolicy
		if err := a.readJSON(cmd, p.file, &np); err != nil {
			return nil, err
		}
		return &np, nil
	}
	if !ruled {
		return nil, nil
	}
	action := api.PolicyAction(p.defaultAction)
	if action == "" {
		action = api.PolicyActionDeny
	}
	if action != api.PolicyActionAllow && action != api.PolicyActionDeny {
		return nil, usagef(cmd, "--default-action %q: want allow or deny", p.defaultAction)
	}
	return &api.NetworkPolicy{DefaultAction: action, Egress: p.rules}, nil
}

// readJSON decodes one JSON value from FILE, or from stdin when name is
// "-", refusing unknown fields. Its errors never quote the input, which may
// hold secrets.
func (a *app) readJSON(cmd *cobra.Command, name string, v any) error {
	var (
		b   []byte
		err error
	)
	what := name
	if name == "-" {
		what = "stdin"
		if b, err = io.ReadAll(a.env.Stdin); err != nil {
			return fmt.Errorf("read stdin: %w", err)
		}
	} else if b, err = os.ReadFile(name); err != nil {
		return usageError{cmd: cmd, err: err}
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	err = d.Decode(v)
	if err == nil && d.More() {
		err = errors.New("more than one JSON value")
	}
	if err != nil {
		return usagef(cmd, "%s: %s", what, jsonProblem(err))
	}
	return nil
}

// jsonProblem describes a decoding error without the offending value.
func jsonProblem(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d", se.Offset)
	case errors.As(err, &te):
		if te.Field != "" {
			return fmt.Sprintf("field %q must be %s", te.Field, jsonKind(te.Type.Kind().String()))
		}
		return "wrong JSON type: want " + jsonKind(te.Type.Kind().String())
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "no JSON value, or an incomplete one"
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

func jsonKind(k string) string {
	switch k {
	case "struct", "map":
		return "an object"
	case "slice", "array":
		return "an array"
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	case "ptr":
		return "an object or null"
	}
	return "a number"
}

func (a *app) newEgressCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "egress",
		Short: "Show and change a sandbox's network policy",
		Long: "Show and change a sandbox's network policy (its egress API, sandbox port 18080).\n" +
			"A target is a name (pypi.org), *.suffix (subdomains only), an IP or a CIDR;\n" +
			"the first matching rule wins.",
		RunE: groupRun,
	}
	cmd.AddCommand(
		&cobra.Command{
			Use:   "get ID",
			Short: "Show a sandbox's network policy",
			Args:  argsUsage(cobra.ExactArgs(1)),
			RunE: a.policyRun(func(c *hybox.Client, cmd *cobra.Command, args []string) (api.PolicyStatus, error) {
				return c.Sandbox(args[0]).EgressPolicy(cmd.Context())
			}),
		},
		a.newRuleCmd(api.PolicyActionAllow, "Allow targets: the new rules go before the existing ones"),
		a.newRuleCmd(api.PolicyActionDeny, "Deny targets: the new rules go before the existing ones"),
		&cobra.Command{
			Use:     "rm ID TARGET...",
			Aliases: []string{"remove", "delete"},
			Short:   "Remove the rules with these targets",
			Args:    argsUsage(cobra.MinimumNArgs(2)),
			RunE: a.policyRun(func(c *hybox.Client, cmd *cobra.Command, args []string) (api.PolicyStatus, error) {
				return c.Sandbox(args[0]).RemoveEgressRules(cmd.Context(), args[1:]...)
			}),
		},
		&cobra.Command{
			Use:   "set ID FILE|-",
			Short: "Replace a sandbox's network policy with a JSON file",
			Long: "Replace a sandbox's network policy with the JSON in FILE (- reads stdin), such as\n" +
				`{"defaultAction": "deny", "egress": [{"action": "allow", "target": "pypi.org"}]}` + "\n" +
				"A policy without defaultAction denies by default.",
			Args: argsUsage(cobra.ExactArgs(2)),
			RunE: a.policyRun(func(c *hybox.Client, cmd *cobra.Command, args []string) (api.PolicyStatus, error) {
				var np api.NetworkPolicy
				if err := a.readJSON(cmd, args[1], &np); err != nil {
					return api.PolicyStatus{}, err
				}
				return c.Sandbox(args[0]).SetEgressPolicy(cmd.Context(), np)
			}),
		},
	)
	return cmd
}

func (a *app) newRuleCmd(action api.PolicyAction, short string) *cobra.Command {
	return &cobra.Command{
		Use:   string(action) + " ID TARGET...",
		Short: short,
		Long: short + ".\nThey keep the order given, and a rule for a target that already has one\n" +
			"replaces it.",
		Args: argsUsage(cobra.MinimumNArgs(2)),
		RunE: a.policyRun(func(c *hybox.Client, cmd *cobra.Command, args []string) (api.PolicyStatus, error) {
			rules := make([]api.EgressRule, 0, len(args)-1)
			for _, t := range args[1:] {
				rules = append(rules, api.EgressRule{Action: action, Target: t})
			}
			return c.Sandbox(args[0]).PatchEgressRules(cmd.Context(), rules...)
		}),
	}
}

// policyRun is the RunE of an egress command: call, then print the policy
// in force.
func (a *app) policyRun(call func(*hybox.Client, *cobra.Command, []string) (api.PolicyStatus, error)) func(*cobra.Command, []string) error {
	return callAndPrint(a, call, writePolicy)
}

// callAndPrint is the RunE shared by the egress and vault commands: call,
// then print the answer as JSON (-o json) or in table form.
func callAndPrint[T any](a *app, call func(*hybox.Client, *cobra.Command, []string) (T, error),
	write func(io.Writer, T) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		asJSON, err := a.json(cmd)
		if err != nil {
			return err
		}
		c, err := a.client(cmd)
		if err != nil {
			return err
		}
		st, err := call(c, cmd, args)
		if err != nil {
			return err
		}
		if asJSON {
			return writeValue(a.env.Stdout, st)
		}
		return write(a.env.Stdout, st)
	}
}

// writePolicy prints a policy as aligned "Field: value" lines, one rule
// per line.
func writePolicy(w io.Writer, st api.PolicyStatus) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Mode:\t%s\n", dash(string(st.Mode)))
	fmt.Fprintf(tw, "Enforcement:\t%s\n", dash(string(st.EnforcementMode)))
	fmt.Fprintf(tw, "Default:\t%s\n", dash(string(st.Policy.DefaultAction)))
	if st.Reason != "" {
		fmt.Fprintf(tw, "Reason:\t%s\n", st.Reason)
	}
	if len(st.Policy.Egress) == 0 {
		fmt.Fprintf(tw, "Rules:\t-\n")
	}
	label := "Rules:"
	for _, r := range st.Policy.Egress {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", label, r.Action, r.Target)
		label = ""
	}
	return tw.Flush()
}

func (a *app) newVaultCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "vault",
		Short: "Manage a sandbox's credential vault",
		Long: "Manage the credential vault of a sandbox created with --credential-proxy.\n" +
			"Secret values are read from a JSON file (or stdin), never from flags, and are\n" +
			"never printed: the server does not return them.",
		RunE: groupRun,
	}
	cmd.AddCommand(
		&cobra.Command{
			Use:   "create ID FILE|-",
			Short: "Create the vault from a JSON file",
			Long: "Create the vault from the JSON in FILE (- reads stdin), as the API takes it:\n" +
				`{"credentials": [{"name": "gh", "source": {"type": "inline", "value": "..."}}],` + "\n" +
				` "bindings": [{"name": "github", "match": {"hosts": ["api.github.com"]},` + "\n" +
				`               "auth": {"type": "bearer", "credential": "gh"}}]}` + "\n" +
				"Auth types: bearer, basic, apiKey (with name: the header), customHeaders, passthrough.",
			Args: argsUsage(cobra.ExactArgs(2)),
			RunE: a.vaultRun(func(c *hybox.Client, cmd *cobra.Command, args []string) (api.VaultState, error) {
				var req api.VaultCreateRequest
				if err := a.readJSON(cmd, args[1], &req); err != nil {
					return api.VaultState{}, err
				}
				return c.Sandbox(args[0]).CreateVault(cmd.Context(), req)
			}),
		},
		&cobra.Command{
			Use:     "get ID",
			Aliases: []string{"show"},
			Short:   "Show the vault's credentials (without values) and bindings",
			Args:    argsUsage(cobra.ExactArgs(1)),
			RunE: a.vaultRun(func(c *hybox.Client, cmd *cobra.Command, args []string) (api.VaultState, error) {
				return c.Sandbox(args[0]).Vault(cmd.Context())
			}),
		},
		&cobra.Command{
			Use:   "patch ID FILE|-",
			Short: "Edit the vault with a JSON patch file",
			Long: "Edit the vault with the JSON in FILE (- reads stdin), applied atomically:\n" +
				`{"expectedRevision": 1,` + "\n" +
				` "credentials": {"add": [...], "replace": [...], "delete": ["name"]},` + "\n" +
				` "bindings": {"add": [...], "replace": [...], "delete": ["name"]}}` + "\n" +
				"A stale expectedRevision fails with a conflict.",
			Args: argsUsage(cobra.ExactArgs(2)),
			RunE: a.vaultRun(func(c *hybox.Client, cmd *cobra.Command, args []string) (api.VaultState, error) {
				var req api.VaultPatchRequest
				if err := a.readJSON(cmd, args[1], &req); err != nil {
					return api.VaultState{}, err
				}
				return c.Sandbox(args[0]).PatchVault(cmd.Context(), req)
			}),
		},
		&cobra.Command{
			Use:     "rm ID",
			Aliases: []string{"remove", "delete"},
			Short:   "Delete the vault",
			Args:    argsUsage(cobra.ExactArgs(1)),
			RunE: func(cmd *cobra.Command, args []string) error {
				c, err := a.client(cmd)
				if err != nil {
					return err
				}
				if err := c.Sandbox(args[0]).DeleteVault(cmd.Context()); err != nil {
					return err
				}
				_, err = fmt.Fprintln(a.env.Stdout, args[0])
				return err
			},
		},
	)
	return cmd
}

// vaultRun is the RunE of a vault command: call, then print the vault.
func (a *app) vaultRun(call func(*hybox.Client, *cobra.Command, []string) (api.VaultState, error)) func(*cobra.Command, []string) error {
	return callAndPrint(a, call, writeVault)
}

// writeVault prints a vault: its revision, then a table of credentials
// and one of bindings.
func writeVault(w io.Writer, st api.VaultState) error {
	fmt.Fprintf(w, "Revision: %d\n", st.Revision)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CREDENTIAL\tSOURCE\tREVISION")
	for _, c := range st.Credentials {
		fmt.Fprintf(tw, "%s\t%s\t%d\n", c.Name, dash(c.SourceType), c.Revision)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BINDING\tAUTH\tSCHEMES\tHOSTS\tPATHS\tMETHODS\tREVISION")
	for _, b := range st.Bindings {
		auth := "-"
		if b.Auth != nil {
			auth = b.Auth.Type
			if b.Auth.Name != "" {
				auth += " (" + b.Auth.Name + ")"
			}
		}
		var m api.VaultMatch
		if b.Match != nil {
			m = *b.Match
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", b.Name, auth, list(m.Schemes), list(m.Hosts), list(m.Paths), list(m.Methods), b.Revision)
	}
	return tw.Flush()
}

// list joins a list with commas; an empty one is "-".
func list(l []string) string { return dash(strings.Join(l, ",")) }
