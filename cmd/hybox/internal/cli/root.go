// Package cli implements the client commands of the hybox binary (sandbox,
// exec, run, files, image, egress, vault) on top of the Go SDK (sdks/go),
// and the mapping of their outcomes to exit codes. It sees the process only through Env, so tests run
// it in-process; cmd/hybox adds the server's own command (serve) to it.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/spf13/cobra"

	hybox "github.com/hybox-dev/hybox/sdks/go"
)

// Environment variables read for the global flags' defaults: hybox's
// names first, then the OpenSandbox ones.
const (
	EnvDomain = hybox.EnvDomain
	EnvAPIKey = hybox.EnvAPIKey
)

// DefaultDomain is the server used when neither --domain nor
// OPEN_SANDBOX_DOMAIN is set.
const DefaultDomain = "http://127.0.0.1:8080"

// Exit codes.
const (
	ExitOK          = 0
	ExitError       = 1 // a failed call, a failed execution
	ExitUsage       = 2 // bad flags or arguments
	ExitInterrupted = 130
)

// Env is what the CLI sees of its process.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Getenv looks up environment variables; nil means none are set.
	Getenv func(string) string
	// HTTPClient is used for every request; nil means a default client.
	HTTPClient *http.Client
}

// app holds the global flags and the process environment of one run.
type app struct {
	env    Env
	domain string
	apiKey string
	output string
}

// Main runs the CLI with args (without the program name) and returns the
// exit code. extra commands, such as serve, are added to the root command.
func Main(ctx context.Context, env Env, args []string, extra ...*cobra.Command) int {
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	if env.Stdin == nil {
		env.Stdin = strings.NewReader("")
	}
	if env.Stdout == nil {
		env.Stdout = io.Discard
	}
	if env.Stderr == nil {
		env.Stderr = io.Discard
	}
	a := &app{env: env}
	root := a.newRoot()
	root.AddCommand(extra...)
	root.SetArgs(args)
	root.SetIn(env.Stdin)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	cmd, err := root.ExecuteContextC(ctx)
	return a.exitCode(cmd, err)
}

func (a *app) newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "hybox",
		Short: "hybox: sandboxes for AI agents (OpenSandbox-compatible)",
		Long: "hybox runs code, commands and file operations in sandboxes.\n\n" +
			"Client commands talk to a hybox (or any OpenSandbox) server at --domain\n" +
			"(env " + EnvDomain + " or " + hybox.EnvOpenSandboxDomain + ", default " + DefaultDomain + ")\n" +
			"with the API key --api-key (env " + EnvAPIKey + " or " + hybox.EnvOpenSandboxKey + ").",
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.CompletionOptions.DisableDefaultCmd = true
	pf := root.PersistentFlags()
	pf.StringVar(&a.domain, "domain", "", "server address (env "+EnvDomain+" or "+hybox.EnvOpenSandboxDomain+"; default "+DefaultDomain+"; no scheme means http://)")
	pf.StringVar(&a.apiKey, "api-key", "", "API key (env "+EnvAPIKey+" or "+hybox.EnvOpenSandboxKey+")")
	pf.StringVarP(&a.output, "output", "o", "table", "output format: table or json")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{cmd: c, err: err}
	})
	root.AddCommand(a.newSandboxCmd(), a.newExecCmd(), a.newRunCmd(), a.newFilesCmd(), a.newImageCmd(), a.newPoolCmd(), a.newVolumeCmd(),
		a.newEgressCmd(), a.newVaultCmd())
	return root
}

// usageError is a mistake in flags or arguments: exit code 2.
type usageError struct {
	cmd *cobra.Command
	err error
}

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef returns a usage error of cmd.
func usagef(cmd *cobra.Command, format string, args ...any) error {
	return usageError{cmd: cmd, err: fmt.Errorf(format, args...)}
}

// exitError ends the program with code; its message, if any, is printed
// as "error: message".
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return fmt.Sprintf("exit %d: %s", e.code, e.msg) }

// argsUsage wraps a positional-args validator so that its errors are usage
// errors.
func argsUsage(v cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := v(cmd, args); err != nil {
			return usageError{cmd: cmd, err: err}
		}
		return nil
	}
}

// exitCode prints err and returns the exit code for it.
func (a *app) exitCode(cmd *cobra.Command, err error) int {
	if err == nil {
		return ExitOK
	}
	var ee exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintf(a.env.Stderr, "error: %s\n", ee.msg)
		}
		return ee.code
	}
	var ue usageError
	if errors.As(err, &ue) || isCobraUsage(err) {
		if ue.cmd != nil {
			cmd = ue.cmd
		}
		fmt.Fprintf(a.env.Stderr, "error: %v\n", err)
		if cmd != nil {
			fmt.Fprintf(a.env.Stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
		return ExitUsage
	}
	if errors.Is(err, context.Canceled) {
		fmt.Fprintln(a.env.Stderr, "error: interrupted")
		return ExitInterrupted
	}
	fmt.Fprintf(a.env.Stderr, "error: %s\n", errText(err))
	return ExitError
}

// errText is how the CLI prints an error: "CODE: message" for an answer
// of the server, else the error's text without the SDK's prefix.
func errText(err error) string {
	var ae *hybox.APIError
	if errors.As(err, &ae) {
		return ae.Code + ": " + ae.Message
	}
	return strings.TrimPrefix(err.Error(), "hybox: ")
}

// isCobraUsage recognises the usage errors cobra makes itself.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "required flag", "if any flags in the group", "none of the others can be"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// client returns a lifecycle client from the global flags and environment.
func (a *app) client(cmd *cobra.Command) (*hybox.Client, error) {
	domain := a.domain
	if !cmd.Flags().Changed("domain") {
		domain = a.getenv(EnvDomain, hybox.EnvOpenSandboxDomain)
	}
	if domain == "" {
		domain = DefaultDomain
	}
	key := a.apiKey
	if !cmd.Flags().Changed("api-key") {
		key = a.getenv(EnvAPIKey, hybox.EnvOpenSandboxKey)
	}
	opts := []hybox.Option{hybox.WithDomain(domain), hybox.WithAPIKey(key), hybox.WithUserAgent("hybox-cli")}
	if a.env.HTTPClient != nil {
		opts = append(opts, hybox.WithHTTPClient(a.env.HTTPClient))
	}
	c, err := hybox.New(opts...)
	if err != nil {
		return nil, usageError{cmd: cmd, err: err}
	}
	return c, nil
}

// getenv returns the first of the variables names that is set.
func (a *app) getenv(names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(a.env.Getenv(n)); v != "" {
			return v
		}
	}
	return ""
}

// json reports whether -o json was chosen; other values than table and
// json are usage errors.
func (a *app) json(cmd *cobra.Command) (bool, error) {
	switch a.output {
	case "json":
		return true, nil
	case "table", "":
		return false, nil
	}
	return false, usagef(cmd, "unknown output format %q (want table or json)", a.output)
}

// groupRun is the RunE of a command that only groups subcommands: help
// without arguments, a usage error for an unknown subcommand.
func groupRun(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef(cmd, "unknown command %q for %q", args[0], cmd.CommandPath())
	}
	return cmd.Help()
}

// newRmCmd is an "rm NAME..." command that removes each name with del.
func (a *app) newRmCmd(short string, del func(c *hybox.Client, ctx context.Context, name string) error) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME...",
		Short: short,
		Args:  argsUsage(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			for _, n := range args {
				if err := del(c, cmd.Context(), n); err != nil {
					return err
				}
			}
			return nil
		},
	}
}
