package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	hybox "github.com/hybox-dev/hybox/sdks/go"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

func (a *app) newSandboxCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "sandbox",
		Aliases: []string{"sb", "sandboxes"},
		Short:   "Create, list, inspect, renew and kill sandboxes",
		RunE:    groupRun,
	}
	cmd.AddCommand(a.newCreateCmd(), a.newListCmd(), a.newGetCmd(), a.newKillCmd(), a.newRenewCmd(),
		a.newStateCmd("pause", "Pause a sandbox", (*hybox.Sandbox).Pause),
		a.newStateCmd("resume", "Resume a paused sandbox", (*hybox.Sandbox).Resume))
	return cmd
}

var runtimeNames = []string{"wasm", "runc", "runsc"}

func (a *app) newCreateCmd() *cobra.Command {
	var (
		image, runtime, memory, cpu string
		env, metadata               []string
		wait                        bool
		timeout                     = seconds{d: 600 * time.Second}
		policy                      policyFlags
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a sandbox and print its id",
		Long: "Create a sandbox and print its id (-o json prints the server's answer).\n" +
			"--timeout is its lifetime (seconds or a duration such as 1h; 0 = never expires).\n" +
			"--allow and --deny restrict outbound traffic, first match wins, in the order given\n" +
			"(across both flags); traffic no rule matches is denied unless --default-action allow.\n" +
			"Without them (or --network-policy) the sandbox's egress is unrestricted.",
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := a.json(cmd)
			if err != nil {
				return err
			}
			req := api.CreateSandboxRequest{Image: api.ImageSpec{URI: image}}
			if timeout.d > 0 {
				if timeout.d < time.Minute {
					return usagef(cmd, "--timeout must be at least 60 seconds (or 0 for no expiry)")
				}
				n := float64((timeout.d + time.Second - 1) / time.Second)
				req.Timeout = &n
			}
			if req.Env, err = parsePairs("env", env); err != nil {
				return usageError{cmd: cmd, err: err}
			}
			meta, err := parsePairs("metadata", metadata)
			if err != nil {
				return usageError{cmd: cmd, err: err}
			}
			req.Metadata = meta
			if runtime != "" {
				if !contains(runtimeNames, runtime) {
					return usagef(cmd, "--runtime %q: want one of %s", runtime, strings.Join(runtimeNames, ", "))
				}
				req.Extensions = api.Extensions{hybox.RuntimeExtension: runtime}
			}
			if memory != "" || cpu != "" {
				req.ResourceLimits = map[string]string{}
				if memory != "" {
					req.ResourceLimits["memory"] = memory
				}
				if cpu != "" {
					req.ResourceLimits["cpu"] = cpu
				}
			}
			if err := policy.apply(a, cmd, &req); err != nil {
				return err
			}
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			sb, err := c.Create(cmd.Context(), req)
			if err != nil {
				return err
			}
			if wait {
				if _, err = sb.WaitRunning(cmd.Context(), 0); err != nil {
					return err
				}
			}
			if asJSON {
				return writeValue(a.env.Stdout, sb.Info())
			}
			_, err = fmt.Fprintln(a.env.Stdout, sb.ID())
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&image, "image", "wasm://default", "image URI")
	f.Var(&timeout, "timeout", "lifetime: seconds or a duration (0 = never expires)")
	f.StringArrayVar(&env, "env", nil, "environment variable KEY=VALUE (repeatable)")
	f.StringArrayVar(&metadata, "metadata", nil, "metadata KEY=VALUE (repeatable)")
	f.StringVar(&runtime, "runtime", "", "runtime: wasm, runc or runsc (default: chosen by the server from the image)")
	f.StringVar(&memory, "memory", "", "memory limit, such as 512Mi")
	f.StringVar(&cpu, "cpu", "", "CPU limit, such as 1 or 500m")
	f.BoolVar(&wait, "wait", false, "wait until the sandbox is Running")
	policy.register(cmd)
	return cmd
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (a *app) newListCmd() *cobra.Command {
	var (
		states, metadata []string
		page, pageSize   int
	)
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List sandboxes",
		Args:    argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := a.json(cmd)
			if err != nil {
				return err
			}
			meta, err := parsePairs("metadata", metadata)
			if err != nil {
				return usageError{cmd: cmd, err: err}
			}
			if page < 0 || pageSize < 0 {
				return usagef(cmd, "--page and --page-size must be positive")
			}
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			var st []api.SandboxState
			for _, s := range states {
				st = append(st, api.SandboxState(s))
			}
			l, err := c.List(cmd.Context(), hybox.ListOptions{States: st, Metadata: meta, Page: page, PageSize: pageSize})
			if err != nil {
				return err
			}
			if asJSON {
				return writeValue(a.env.Stdout, l)
			}
			tw := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tIMAGE\tRUNTIME\tCREATED\tEXPIRES")
			for _, sb := range l.Items {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", sb.ID, dash(string(sb.Status.State)), dash(sb.Image.URI),
					dash(sb.Extensions[hybox.RuntimeExtension]), formatTime(sb.CreatedAt), formatTime(sb.ExpiresAt))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if p := l.Pagination; p.HasNextPage {
				fmt.Fprintf(a.env.Stderr, "page %d of %d (%d sandboxes); next: --page %d\n", p.Page, p.TotalPages, p.TotalItems, p.Page+1)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&states, "state", nil, "only sandboxes in this state (repeatable: any of them)")
	f.StringArrayVar(&metadata, "metadata", nil, "only sandboxes with metadata KEY=VALUE (repeatable: all of them)")
	f.IntVar(&page, "page", 0, "page number, from 1")
	f.IntVar(&pageSize, "page-size", 0, "sandboxes per page")
	return cmd
}

func (a *app) newGetCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "get ID",
		Aliases: []string{"inspect", "show"},
		Short:   "Show a sandbox",
		Args:    argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := a.json(cmd)
			if err != nil {
				return err
			}
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			sb, err := c.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return writeValue(a.env.Stdout, sb)
			}
			return writeSandbox(a.env.Stdout, sb)
		},
	}
}

// writeSandbox prints one sandbox as aligned "Field: value" lines.
func writeSandbox(w io.Writer, sb api.Sandbox) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	row("ID", sb.ID)
	row("State", string(sb.Status.State))
	row("Reason", sb.Status.Reason)
	row("Message", sb.Status.Message)
	row("Image", sb.Image.URI)
	row("Runtime", sb.Extensions[hybox.RuntimeExtension])
	row("Snapshot", sb.SnapshotID)
	row("Platform", strings.Trim(string(sb.Platform.Os)+"/"+string(sb.Platform.Arch), "/"))
	row("Created", formatTime(sb.CreatedAt))
	row("Expires", formatTime(sb.ExpiresAt))
	if len(sb.Entrypoint) > 0 {
		q := make([]string, len(sb.Entrypoint))
		for i, a := range sb.Entrypoint {
			q[i] = shellQuote(a)
		}
		row("Entrypoint", strings.Join(q, " "))
	}
	keys := make([]string, 0, len(sb.Metadata))
	for k := range sb.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	label := "Metadata:"
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s=%s\n", label, k, sb.Metadata[k])
		label = ""
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func (a *app) newKillCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "kill ID...",
		Aliases: []string{"rm", "delete"},
		Short:   "Terminate and remove sandboxes",
		Args:    argsUsage(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			if len(args) == 1 {
				if err := c.Sandbox(args[0]).Kill(cmd.Context()); err != nil {
					return err
				}
				_, err = fmt.Fprintln(a.env.Stdout, args[0])
				return err
			}
			failed := 0
			for _, id := range args {
				if err := c.Sandbox(id).Kill(cmd.Context()); err != nil {
					fmt.Fprintf(a.env.Stderr, "error: %s: %s\n", id, errText(err))
					failed++
					continue
				}
				fmt.Fprintln(a.env.Stdout, id)
			}
			if failed > 0 {
				return exitError{code: ExitError}
			}
			return nil
		},
	}
}

func (a *app) newRenewCmd() *cobra.Command {
	var (
		timeout   seconds
		expiresAt string
	)
	cmd := &cobra.Command{
		Use:   "renew ID (--timeout DURATION | --expires-at RFC3339)",
		Short: "Set when a sandbox expires",
		Args:  argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := a.json(cmd)
			if err != nil {
				return err
			}
			var at time.Time
			switch {
			case cmd.Flags().Changed("timeout") && cmd.Flags().Changed("expires-at"):
				return usagef(cmd, "give either --timeout or --expires-at, not both")
			case cmd.Flags().Changed("timeout"):
				if timeout.d <= 0 {
					return usagef(cmd, "--timeout must be positive")
				}
				at = time.Now().Add(timeout.d)
			case cmd.Flags().Changed("expires-at"):
				if at, err = time.Parse(time.RFC3339, expiresAt); err != nil {
					return usagef(cmd, "--expires-at %q: want RFC 3339 such as 2030-01-02T15:04:05Z", expiresAt)
				}
			default:
				return usagef(cmd, "give --timeout or --expires-at")
			}
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			got, err := c.Sandbox(args[0]).Renew(cmd.Context(), at)
			if err != nil {
				return err
			}
			if asJSON {
				return writeValue(a.env.Stdout, map[string]time.Time{"expiresAt": got})
			}
			_, err = fmt.Fprintln(a.env.Stdout, got.UTC().Format(time.RFC3339))
			return err
		},
	}
	cmd.Flags().Var(&timeout, "timeout", "expire this long from now (seconds or a duration)")
	cmd.Flags().StringVar(&expiresAt, "expires-at", "", "expire at this time (RFC 3339)")
	return cmd
}

func (a *app) newStateCmd(use, short string, call func(*hybox.Sandbox, context.Context) error) *cobra.Command {
	return &cobra.Command{
		Use:   use + " ID",
		Short: short,
		Args:  argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			if err := call(c.Sandbox(args[0]), cmd.Context()); err != nil {
				return err
			}
			_, err = fmt.Fprintln(a.env.Stdout, args[0])
			return err
		},
	}
}
