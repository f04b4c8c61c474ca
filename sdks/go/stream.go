package hybox

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"strconv"
	"strings"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// maxEventBytes bounds one event of a stream.
const maxEventBytes = 16 << 20

// commandExecError is the ename of the error event of a command that
// exited with a non-zero code; its evalue is the code.
const commandExecError = "CommandExecError"

// eventReader parses an execution stream: JSON objects separated by blank
// lines, each line optionally prefixed with SSE's "data:"; other SSE fields
// and comments are ignored.
type eventReader struct {
	r   *bufio.Reader
	buf []byte
}

func newEventReader(r io.Reader) *eventReader {
	return &eventReader{r: bufio.NewReaderSize(r, 32<<10)}
}

// next returns the next event, or io.EOF after the last one.
func (er *eventReader) next() (api.Event, error) {
	er.buf = er.buf[:0]
	for {
		line, err := er.r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long line: gather it whole.
			long := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = er.r.ReadSlice('\n')
				long = append(long, line...)
				if len(long) > maxEventBytes {
					return api.Event{}, fmt.Errorf("%w: event larger than %d bytes", ErrMalformedEvent, maxEventBytes)
				}
			}
			line = long
		}
		if len(line) > 0 {
			if ev, ok, perr := er.line(bytes.TrimRight(line, "\r\n")); ok || perr != nil {
				return ev, perr
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) && len(bytes.TrimSpace(er.buf)) > 0 {
				return er.flush()
			}
			return api.Event{}, err
		}
	}
}

// line adds one line to the event being read; ok is true when an event is
// complete.
func (er *eventReader) line(line []byte) (api.Event, bool, error) {
	if len(bytes.TrimSpace(line)) == 0 {
		if len(bytes.TrimSpace(er.buf)) == 0 {
			return api.Event{}, false, nil
		}
		ev, err := er.flush()
		return ev, true, err
	}
	if line[0] == ':' {
		return api.Event{}, false, nil
	}
	payload := line
	if p, ok := bytes.CutPrefix(line, []byte("data:")); ok {
		payload, _ = bytes.CutPrefix(p, []byte(" "))
	} else if name, _, ok := bytes.Cut(line, []byte(":")); ok {
		switch string(name) {
		case "event", "id", "retry":
			return api.Event{}, false, nil
		}
	}
	single := len(er.buf) == 0
	if !single {
		er.buf = append(er.buf, '\n')
	}
	er.buf = append(er.buf, payload...)
	if len(er.buf) > maxEventBytes {
		return api.Event{}, false, fmt.Errorf("%w: event larger than %d bytes", ErrMalformedEvent, maxEventBytes)
	}
	// One object per line without blank lines in between: a line that is a
	// whole object is an event.
	if t := bytes.TrimSpace(er.buf); single && len(t) > 1 && t[0] == '{' && t[len(t)-1] == '}' && json.Valid(t) {
		ev, err := er.flush()
		return ev, true, err
	}
	return api.Event{}, false, nil
}

func (er *eventReader) flush() (api.Event, error) {
	text := bytes.TrimSpace(er.buf)
	er.buf = er.buf[:0]
	var ev api.Event
	if len(text) == 0 || text[0] != '{' {
		return ev, fmt.Errorf("%w: %q", ErrMalformedEvent, clip(text))
	}
	if err := json.Unmarshal(text, &ev); err != nil {
		return ev, fmt.Errorf("%w: %v: %q", ErrMalformedEvent, err, clip(text))
	}
	return ev, nil
}

func clip(b []byte) string {
	if len(b) > 120 {
		return string(b[:120]) + "…"
	}
	return string(b)
}

// events yields the events of body and closes it when done or when the
// consumer stops.
func events(body io.ReadCloser) iter.Seq2[api.Event, error] {
	return func(yield func(api.Event, error) bool) {
		defer body.Close()
		er := newEventReader(body)
		for {
			ev, err := er.next()
			if errors.Is(err, io.EOF) {
				return
			}
			if !yield(ev, err) || err != nil {
				return
			}
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
			h.OnError(ev.Error)
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
		return &ExecutionError{ID: x.ID, ExitCode: x.ExitCode, ExecError: api.ExecError{Ename: "Incomplete"}}
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
	if e.Ename == commandExecError {
		return "hybox: command exited with code " + e.Evalue
	}
	return "hybox: " + e.Ename + ": " + e.Evalue
}

// Unwrap returns ErrExitStatus for a command that exited with a non-zero
// code, and ErrTimeout for an execution stopped at its time limit (a
// command killed then has both).
func (e *ExecutionError) Unwrap() []error {
	var errs []error
	if e.Ename == commandExecError {
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
	if e.Ename == "TimeoutError" {
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
		e := ev.Error
		if e.Ename == "" {
			e.Ename, e.Evalue = "Error", ev.Text
		}
		x.Error = &e
		x.ExitCode = -1
		if e.Ename == commandExecError {
			if n, err := strconv.Atoi(e.Evalue); err == nil {
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

// finished reports whether x saw its terminal event.
func (x *Execution) finished() bool { return x.Complete || x.Error != nil }
