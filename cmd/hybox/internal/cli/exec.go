package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	hybox "github.com/hybox-dev/hybox/sdks/go"
	"github.com/hybox-dev/hybox/sdks/go/api"
)

func (a *app) newExecCmd() *cobra.Command {
	var (
		cwd        string
		env        []string
		timeout    seconds
		background bool
	)
	cmd := &cobra.Command{
		Use:   "exec ID -- COMMAND [ARG...]",
		Short: "Run a command in a sandbox",
		Long: "Run a shell command in a sandbox, streaming its stdout and stderr, and exit with\n" +
			"its exit code. One COMMAND argument is a shell command line as it is\n" +
			"(hybox exec ID -- 'ls | wc -l'); several are quoted and joined.\n" +
			"--background starts it and prints its id.",
		Args: argsUsage(cobra.MinimumNArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, argv := args[0], args[1:]
			if argv[0] == "--" {
				argv = argv[1:]
			}
			if len(argv) == 0 {
				return usagef(cmd, "no command given")
			}
			envs, err := parsePairs("env", env)
			if err != nil {
				return usageError{cmd: cmd, err: err}
			}
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			sb := c.Sandbox(id)
			req := hybox.Command{Command: shellJoin(argv), Cwd: cwd, Timeout: timeout.d.Milliseconds(), Envs: envs}
			if background {
				bg, err := sb.Start(ctx, req)
				if err != nil {
					return a.streamFailed(ctx, err)
				}
				_, err = fmt.Fprintln(a.env.Stdout, bg.ID)
				return err
			}
			x, err := sb.Exec(ctx, req, &hybox.Handlers{
				OnStdout: func(s string) { fmt.Fprintln(a.env.Stdout, s) },
				OnStderr: func(s string) { fmt.Fprintln(a.env.Stderr, s) },
			})
			if err != nil {
				return a.streamFailed(ctx, err)
			}
			switch err := x.Err(); {
			case err == nil:
				return nil
			case errors.Is(err, hybox.ErrExitStatus):
				return exitError{code: x.ExitCode}
			default:
				return exitError{code: ExitError, msg: strings.TrimPrefix(err.Error(), "hybox: ")}
			}
		},
	}
	f := cmd.Flags()
	f.SetInterspersed(false) // everything after ID belongs to the command
	f.StringVar(&cwd, "cwd", "", "working directory of the command")
	f.StringArrayVar(&env, "env", nil, "environment variable KEY=VALUE (repeatable)")
	f.Var(&timeout, "timeout", "kill the command after this long (seconds or a duration; default: the server's)")
	f.BoolVar(&background, "background", false, "start the command in the background and print its id")
	return cmd
}

// streamFailed handles an execution that ended badly. When the user
// interrupted (ctx cancelled), the SDK has interrupted the remote
// execution.
func (a *app) streamFailed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return exitError{code: ExitInterrupted, msg: "interrupted"}
	}
	if errors.Is(err, hybox.ErrIncomplete) {
		return exitError{code: ExitError, msg: "the stream ended before the execution finished"}
	}
	return err
}

var languages = []string{"python", "javascript", "typescript", "bash"}

func (a *app) newRunCmd() *cobra.Command {
	var (
		sandboxID, language, contextID, file string
		timeout                              seconds
		policy                               policyFlags
	)
	cmd := &cobra.Command{
		Use:   "run [--sandbox ID] [--language L] (CODE | -f FILE | -)",
		Short: "Run code, in a sandbox or in a one-shot one",
		Long: "Run Python, JavaScript, TypeScript or Bash code and stream its output; results are\nprinted after it.\n" +
			"Without --sandbox the code runs in a throw-away sandbox (POST /v1/run). With\n" +
			"--sandbox it runs in the sandbox's default context of the language, or in\n" +
			"--context. On error the traceback goes to stderr and the exit code is 1.\n" +
			"The code comes from the argument, from -f FILE, or from stdin with - (or -f -).\n" +
			"A one-shot sandbox has no network unless --allow, --deny, --default-action or\n" +
			"--network-policy give it a policy (as for sandbox create).",
		Args: argsUsage(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !contains(languages, language) {
				return usagef(cmd, "--language %q: want one of %s", language, strings.Join(languages, ", "))
			}
			if contextID != "" && sandboxID == "" {
				return usagef(cmd, "--context needs --sandbox")
			}
			np, err := policy.policy(a, cmd)
			if err != nil {
				return err
			}
			if np != nil && sandboxID != "" {
				return usagef(cmd, "a network policy applies to one-shot runs: change a sandbox's with hybox egress")
			}
			code, err := a.readCode(cmd, args, file)
			if err != nil {
				return err
			}
			c, err := a.client(cmd)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			h := &hybox.Handlers{OnEvent: a.printCodeEvent}
			var x *hybox.Execution
			if sandboxID == "" {
				x, err = c.Run(ctx, api.RunRequest{Language: language, Code: &code, TimeoutMs: timeout.d.Milliseconds(), NetworkPolicy: np}, h)
			} else {
				if timeout.d > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, timeout.d)
					defer cancel()
				}
				req := hybox.CodeOf(language, code)
				req.Context.ID = contextID
				x, err = c.Sandbox(sandboxID).RunCode(ctx, req, h)
			}
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, hybox.ErrIncomplete) {
					return err
				}
				if errors.Is(ctx.Err(), context.DeadlineExceeded) && cmd.Context().Err() == nil {
					return exitError{code: ExitError, msg: "timed out after " + timeout.d.String()}
				}
				return a.streamFailed(ctx, err)
			}
			if x.Error != nil {
				a.printTraceback(x.Error)
				return exitError{code: ExitError}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&sandboxID, "sandbox", "", "run in this sandbox (default: a one-shot sandbox)")
	f.StringVarP(&language, "language", "l", "python", "language: python or javascript")
	f.StringVar(&contextID, "context", "", "code context id in the sandbox (default: the language's default context)")
	f.StringVarP(&file, "file", "f", "", "read the code from FILE (- for stdin)")
	f.Var(&timeout, "timeout", "stop the code after this long (seconds or a duration)")
	policy.registerRules(cmd)
	return cmd
}

// readCode returns the code from the argument, -f FILE or stdin.
func (a *app) readCode(cmd *cobra.Command, args []string, file string) (string, error) {
	switch {
	case len(args) == 1 && file != "":
		return "", usagef(cmd, "give the code either as an argument or with -f, not both")
	case len(args) == 0 && file == "":
		return "", usagef(cmd, "no code: give CODE, -f FILE, or - to read stdin")
	case file == "-" || len(args) == 1 && args[0] == "-":
		b, err := io.ReadAll(a.env.Stdin)
		if err != nil {
			return "", fmt.Errorf("read stdin: %w", err)
		}
		return string(b), nil
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", usageError{cmd: cmd, err: err}
		}
		return string(b), nil
	}
	return args[0], nil
}

// printCodeEvent writes one event of a code stream: output as it comes
// (code output carries its own newlines), results as text.
func (a *app) printCodeEvent(ev api.Event) {
	switch ev.Type {
	case api.EventTypeStdout:
		io.WriteString(a.env.Stdout, ev.Text)
	case api.EventTypeStderr:
		io.WriteString(a.env.Stderr, ev.Text)
	case api.EventTypeResult:
		if s, ok := resultText(ev.Results); ok {
			if !strings.HasSuffix(s, "\n") {
				s += "\n"
			}
			io.WriteString(a.env.Stdout, s)
			return
		}
		kinds := make([]string, 0, len(ev.Results))
		for k := range ev.Results {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		fmt.Fprintf(a.env.Stderr, "[result not shown: %s]\n", strings.Join(kinds, ", "))
	}
}

// resultText returns the plain-text form of a result ("text", or
// "text/plain" from servers that do not rename it).
func resultText(r api.MimeBundle) (string, bool) {
	if s, ok := r["text"]; ok {
		return s, true
	}
	s, ok := r["text/plain"]
	return s, ok
}

// printTraceback writes a code error to stderr.
func (a *app) printTraceback(e *api.ExecError) {
	if len(e.Traceback) > 0 {
		for _, l := range e.Traceback {
			fmt.Fprintln(a.env.Stderr, strings.TrimRight(l, "\n"))
		}
		return
	}
	fmt.Fprintln(a.env.Stderr, e.EName+": "+e.EValue)
}
