package hybox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"strconv"
	"strings"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// commandExecError is the ename of the error event of a command that
// exited with a non-zero code; its evalue is the code.
const commandExecError = "CommandExecError"

// events yields the events of body, read by the protocol's own stream
// reader (api.ReadEvents), and closes body when done or when the consumer
// stops.
func events(body io.ReadCloser) iter.Seq2[api.Event, error] {
	return func(yield func(api.Event, error) bool) {
		defer body.Close()
		stopped := false
		err := api.ReadEvents(body, func(ev api.Event) bool {
			if !yield(ev, nil) {
				stopped = true
				return false
			}
			return true
		})
		if err != nil && !stopped {
			var se *json.SyntaxError
			var te *json.UnmarshalTypeError
			if errors.As(err, &se) || errors.As(err, &te) {
				err = fmt.Errorf("%w: %w", ErrMalformedEvent, err)
			}
			yield(api.Event{}, err)
		}
	}
}

// Handlers receive the events of an execution as they arrive. Any of them
// may be nil. They are called from the goroutine that runs the execution,
// one at a time, in the order of the stream.
type Handlers struct {
	// OnInit receives the execution id.
	OnInit func(id string)
	// OnStdout receives each line of standard output (without its
	// newline) or each chunk a code context printed.
	OnStdout func(text string)
	// OnStderr receives each line or chunk of standard error.
	OnStderr func(text string)
	// OnResult receives each rich result (the value of an expression,
	// display data) as a MIME bundle.
	OnResult func(result api.MimeBundle)
	// OnError receives the failure of the execution: an exception, a
	// timeout, an interruption or (for commands) a non-zero exit.
	OnError func(e api.ExecError)
	// OnEvent receives every event, the above included.
	OnEvent func(ev api.Event)
}

func (h *Handlers) dispatch(ev api.Event) {
	if h == nil {
		return
	}
	switch ev.Type {
	case api.EventTypeInit:
		if h.OnInit != nil {
			h.OnInit(ev.Text)
		}
	case api.EventTypeStdout:
		if h.OnStdout != nil {
			h.OnStdout(ev.Text)
		}
	case api.EventTypeStderr:
		if h.OnStderr != nil {
			h.OnStderr(ev.Text)
		}
	case api.EventTypeResult:
		if h.OnResult != nil {
			h.OnResult(ev.Results)
		}
	case api.EventTypeError:
		if h.OnError != nil {
			h.OnError(errorOf(ev))
		}
	}
	if h.OnEvent != nil {
		h.OnEvent(ev)
	}
}

// Execution is the outcome of a command or code execution.
type Execution struct {
	// ID is the execution (or command) id from the init event.
	ID string
	// Stdout and Stderr are the output texts in order: for commands one
	// entry per line (without its newline), for code the chunks printed.
	Stdout, Stderr []string
	// Results are the rich results in order.
	Results []api.MimeBundle
	// Error is the failure event's error, nil when the execution
	// completed.
	Error *api.ExecError
	// Complete is true when execution_complete arrived.
	Complete bool
	// ExitCode is a command's exit code: 0 when it completed, the code of
	// a non-zero exit, -1 when it ended otherwise (timeout, interruption).
	ExitCode int
	// ExecutionCount is the last execution_count of a code context.
	ExecutionCount int
	// ExecutionTime is the server's duration of the execution in ms.
	ExecutionTime int64

	lines bool // Stdout and Stderr hold lines (commands), not chunks (code)
}

// Text returns the standard output: a command's lines joined by newlines
// (without a final one), or the chunks a code context printed, as printed.
func (x *Execution) Text() string { return x.join(x.Stdout) }

// StderrText returns the standard error, as Text does the output.
func (x *Execution) StderrText() string { return x.join(x.Stderr) }

func (x *Execution) join(s []string) string {
	sep := ""
	if x.lines {
		sep = "\n"
	}
	return strings.Join(s, sep)
}

// Err returns nil when the execution completed (exit code 0), else an
// *ExecutionError describing how it failed.
//
// # Errors
// An *ExecutionError wrapping ErrExitStatus for a non-zero exit and
// ErrTimeout for a time limit; other failures (exceptions, interruptions)
// wrap nothing.
func (x *Execution) Err() error {
	if x.Error == nil && x.Complete {
		return nil
	}
	if x.Error == nil {
		return &ExecutionError{ID: x.ID, ExitCode: x.ExitCode, ExecError: api.ExecError{EName: "Incomplete"}}
	}
	return &ExecutionError{ID: x.ID, ExitCode: x.ExitCode, ExecError: *x.Error}
}

// ExecutionError is a failed execution as an error.
type ExecutionError struct {
	ID       string // the execution id
	ExitCode int    // a command's exit code, -1 when it did not exit by itself
	api.ExecError
}

// Error returns "ename: evalue".
func (e *ExecutionError) Error() string {
	if e.EName == commandExecError {
		return "hybox: command exited with code " + e.EValue
	}
	return "hybox: " + e.EName + ": " + e.EValue
}

// Unwrap returns ErrExitStatus for a command that exited with a non-zero
// code, and ErrTimeout for an execution stopped at its time limit (a
// command killed then has both).
func (e *ExecutionError) Unwrap() []error {
	var errs []error
	if e.EName == commandExecError {
		errs = append(errs, ErrExitStatus)
	}
	if timedOut(e.ExecError) {
		errs = append(errs, ErrTimeout)
	}
	return errs
}

// timedOut reports whether an execution's error says it hit its time
// limit: ename TimeoutError for code, and for a command (whose ename is
// always CommandExecError) the server's cause in the traceback.
func timedOut(e api.ExecError) bool {
	if e.EName == "TimeoutError" {
		return true
	}
	for _, l := range e.Traceback {
		if strings.HasPrefix(l, "execution timed out") {
			return true
		}
	}
	return false
}

// add records ev into x.
func (x *Execution) add(ev api.Event) {
	switch ev.Type {
	case api.EventTypeInit:
		x.ID = ev.Text
	case api.EventTypeStdout:
		x.Stdout = append(x.Stdout, ev.Text)
	case api.EventTypeStderr:
		x.Stderr = append(x.Stderr, ev.Text)
	case api.EventTypeResult:
		x.Results = append(x.Results, ev.Results)
	case api.EventTypeError:
		e := errorOf(ev)
		x.Error = &e
		x.ExitCode = -1
		if e.EName == commandExecError {
			if n, err := strconv.Atoi(e.EValue); err == nil {
				x.ExitCode = n
			}
		}
	case api.EventTypeExecutionComplete:
		x.Complete = true
		x.ExitCode = 0
		x.ExecutionTime = ev.ExecutionTime
	}
	if ev.ExecutionCount > 0 {
		x.ExecutionCount = ev.ExecutionCount
	}
}

// errorOf returns the error of an error event (one named "Error" with the
// event's text when it carries none).
func errorOf(ev api.Event) api.ExecError {
	if ev.Error == nil || ev.Error.EName == "" {
		return api.ExecError{EName: "Error", EValue: ev.Text}
	}
	return *ev.Error
}

// finished reports whether x saw its terminal event.
func (x *Execution) finished() bool { return x.Complete || x.Error != nil }
