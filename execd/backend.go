package execd

import (
	"context"
	"errors"
	"io"
	"os"

	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// Sentinel errors returned by backends. They carry their wire codes
// (errdefs), which turns them into statuses in one place; backends wrap
// them with context.
var (
	// ErrNotSupported: the backend cannot do this (for example a PTY in a
	// wasm sandbox). The message should name what can.
	ErrNotSupported = errdefs.ErrNotSupported
	// ErrUnknownLanguage: no interpreter for the requested language.
	ErrUnknownLanguage = errdefs.New(api.ErrorCodeUNKNOWNLANGUAGE, "unknown language")
	// ErrBusy: the context is already running an execution.
	ErrBusy = errdefs.New(api.ErrorCodeCONTEXTBUSY, "busy")
	// ErrTimeout: the execution hit its wall-clock limit and was stopped.
	ErrTimeout = errors.New("execution timed out")
	// ErrInterrupted: the execution was interrupted by a client.
	ErrInterrupted = errors.New("execution interrupted")
	// ErrContextLost: the interpreter had to be destroyed (timeout, interrupt,
	// memory exhaustion, crash); its state is gone. The next Run on the same
	// context starts from a fresh interpreter.
	ErrContextLost = errors.New("interpreter state lost")
	// ErrOutputLimit: the execution wrote more output than allowed and was stopped.
	ErrOutputLimit = errors.New("output limit exceeded")
	// ErrOverloaded: too many executions are running on this server.
	ErrOverloaded = errdefs.New(api.ErrorCodeTOOMANYEXECUTIONS, "too many concurrent executions")
)

// Output receives what an execution produces, in order, while it runs.
// Implementations must be safe for use by one goroutine at a time; a
// backend never calls them concurrently for one execution.
type Output interface {
	// Stdout is called with a chunk of standard output as soon as the guest
	// writes it (not split into lines).
	Stdout(p []byte)
	// Stderr is called with a chunk of standard error.
	Stderr(p []byte)
	// Result is called with the value of a trailing expression, as a MIME
	// bundle ("text/plain" at least).
	Result(bundle map[string]string)
}

// ExecError describes a user-level failure of code: an exception (the wire
// type ExecError). It is data, not a Go error.
type ExecError = api.ExecError

// Interpreter is one live, stateful interpreter (a code context). It runs one
// execution at a time; execd serialises calls.
type Interpreter interface {
	// Run executes code, streaming output to out. A user exception is
	// returned as a non-nil *ExecError with a nil error. A nil, nil return
	// means success.
	//
	// # Errors
	// When ctx is cancelled or its deadline passes the execution is
	// stopped; Run returns an error wrapping ErrTimeout or ErrInterrupted
	// (according to context.Cause) and, when state was destroyed,
	// ErrContextLost. ErrOutputLimit when output exceeded the cap.
	Run(ctx context.Context, code string, out Output) (*ExecError, error)
	// Close releases the interpreter. It is safe to call more than once.
	Close() error
}

// ProcessSpec describes one shell command to run.
type ProcessSpec struct {
	Command string            // shell source, run by the backend's shell
	Cwd     string            // guest path; "" = backend default
	Env     map[string]string // extra environment variables
	UID     *int              // optional, OCI only
	GID     *int              // optional, OCI only
	Stdout  io.Writer         // written as output is produced
	Stderr  io.Writer
}

// Process is a running command.
type Process interface {
	// Wait blocks until the command ends and returns its exit code. The
	// exit code of a killed command is 128+signal (137 for SIGKILL).
	Wait() (exitCode int, err error)
	// Kill stops the command and everything it started.
	Kill() error
}

// Session is a persistent shell that keeps cwd and environment across runs.
type Session interface {
	// Run runs command in the session and returns its exit code.
	Run(ctx context.Context, command string, stdout, stderr io.Writer) (exitCode int, err error)
	Close() error
}

// Metrics is the body of GET /metrics (the wire type Metrics).
type Metrics = api.Metrics

// Executor is what a sandbox provides to the execd API. The wasm backend
// implements it with wazero and a shell interpreter; hybox-execd with OS
// processes.
type Executor interface {
	// Root is the sandbox's filesystem, the only one the files API touches.
	// Guest path "/" is the root of this os.Root.
	Root() *os.Root
	// Languages lists the code languages this backend can run.
	Languages() []string
	// NewInterpreter starts a fresh interpreter for language with working
	// directory cwd (a guest path; "" = default).
	NewInterpreter(ctx context.Context, language, cwd string) (Interpreter, error)
	// StartCommand starts a shell command. The command runs until it exits,
	// Kill is called, or ctx is done.
	StartCommand(ctx context.Context, spec ProcessSpec) (Process, error)
	// NewSession starts a persistent shell.
	NewSession(ctx context.Context, cwd string, env map[string]string) (Session, error)
	// Metrics reports resource usage of the sandbox.
	Metrics(ctx context.Context) (Metrics, error)
}
