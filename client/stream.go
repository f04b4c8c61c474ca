package client

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Event types of command and code streams.
const (
	EventInit              = "init"
	EventStdout            = "stdout"
	EventStderr            = "stderr"
	EventResult            = "result"
	EventExecutionCount    = "execution_count"
	EventStatus            = "status"
	EventPing              = "ping"
	EventExecutionComplete = "execution_complete"
	EventError             = "error"
)

// CommandExecError is the ename of the error event of a command that
// exited with a non-zero code; its evalue is the code.
const CommandExecError = "CommandExecError"

// ExecError is the error of a failed execution.
type ExecError struct {
	EName     string   `json:"ename"`
	EValue    string   `json:"evalue"`
	Traceback []string `json:"traceback,omitempty"`
}

// Error returns "ename: evalue".
func (e *ExecError) Error() string { return e.EName + ": " + e.EValue }

// Event is one object of a command or code stream.
type Event struct {
	Type           string         `json:"type"`
	Text           string         `json:"text,omitempty"`
	ExecutionCount int            `json:"execution_count,omitempty"`
	ExecutionTime  int64          `json:"execution_time,omitempty"` // ms
	Timestamp      int64          `json:"timestamp,omitempty"`      // unix ms
	Results        map[string]any `json:"results,omitempty"`        // MIME type → data; text/plain is "text"
	Error          *ExecError     `json:"error,omitempty"`
}

// ResultText returns the plain-text form of a result event and whether it
// has one ("text", or "text/plain" from servers that do not rename it).
func (e Event) ResultText() (string, bool) {
	for _, k := range []string{"text", "text/plain"} {
		if s, ok := e.Results[k].(string); ok {
			return s, true
		}
	}
	return "", false
}

// MaxEventBytes bounds one event of a stream.
const MaxEventBytes = 16 << 20

// EventReader parses a stream of events: JSON objects separated by blank
// lines. Each line may carry an SSE "data:" prefix; other SSE fields
// ("event:", "id:", "retry:") and comments (":...") are ignored. Objects
// that follow each other without a blank line (one per line) are accepted
// too.
type EventReader struct {
	r   *bufio.Reader
	buf []byte // the event being accumulated
	err error  // sticky read error
}

// NewEventReader returns a parser reading from r.
func NewEventReader(r io.Reader) *EventReader {
	return &EventReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// Next returns the next event. It returns io.EOF after the last event.
//
// # Errors
// An error wrapping ErrMalformedEvent for an event that is not a JSON
// object or is larger than MaxEventBytes; the reader then skips that event,
// so Next may be called again. Read errors of the underlying reader other
// than io.EOF are returned as they are, and a partly read event is dropped.
func (er *EventReader) Next() (Event, error) {
	for {
		if er.err != nil {
			if errors.Is(er.err, io.EOF) && len(bytes.TrimSpace(er.buf)) > 0 {
				return er.flush()
			}
			er.buf = er.buf[:0]
			return Event{}, er.err
		}
		line, tooLong, err := er.readLine()
		if err != nil {
			er.err = err
		}
		if tooLong || len(er.buf)+len(line) > MaxEventBytes {
			er.buf = er.buf[:0]
			if err == nil {
				er.err = er.skipEvent()
			}
			return Event{}, fmt.Errorf("%w: event larger than %d bytes", ErrMalformedEvent, MaxEventBytes)
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(bytes.TrimSpace(line)) == 0 {
			if len(bytes.TrimSpace(er.buf)) > 0 {
				return er.flush()
			}
			er.buf = er.buf[:0]
			continue
		}
		payload, ok := fieldPayload(line)
		if !ok {
			continue
		}
		single := len(er.buf) == 0
		if !single {
			er.buf = append(er.buf, '\n')
		}
		er.buf = append(er.buf, payload...)
		// One object per line without blank lines between them: emit a
		// line that is a complete object at once. (Only single lines are
		// checked, so that parsing stays linear in the input.)
		if t := bytes.TrimSpace(er.buf); single && len(t) > 0 && t[0] == '{' && t[len(t)-1] == '}' && json.Valid(t) {
			return er.flush()
		}
	}
}

// readLine reads one line with its newline. A line longer than
// MaxEventBytes is consumed in full but returned empty, with tooLong set.
func (er *EventReader) readLine() (line []byte, tooLong bool, err error) {
	for {
		chunk, err := er.r.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > MaxEventBytes {
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return line, tooLong, err
	}
}

// skipEvent discards input up to the next blank line.
func (er *EventReader) skipEvent() error {
	for {
		line, tooLong, err := er.readLine()
		if err != nil {
			return err
		}
		if !tooLong && len(bytes.TrimSpace(line)) == 0 {
			return nil
		}
	}
}

// fieldPayload returns the JSON text of a line: the line itself, or the
// value of a "data:" field. ok is false for lines to ignore: SSE comments
// and the other SSE fields.
func fieldPayload(line []byte) ([]byte, bool) {
	if line[0] == ':' {
		return nil, false
	}
	if p, ok := bytes.CutPrefix(line, []byte("data:")); ok {
		p, _ = bytes.CutPrefix(p, []byte(" "))
		return p, true
	}
	name, _, _ := bytes.Cut(line, []byte(":"))
	switch string(name) {
	case "data", "event", "id", "retry":
		return nil, false
	}
	return line, true
}

// flush decodes the accumulated event and resets the buffer.
func (er *EventReader) flush() (Event, error) {
	text := bytes.TrimSpace(er.buf)
	defer func() { er.buf = er.buf[:0] }()
	var ev Event
	if len(text) == 0 || text[0] != '{' {
		return Event{}, fmt.Errorf("%w: %q", ErrMalformedEvent, clip(text))
	}
	if err := json.Unmarshal(text, &ev); err != nil {
		return Event{}, fmt.Errorf("%w: %v: %q", ErrMalformedEvent, err, clip(text))
	}
	return ev, nil
}

func clip(b []byte) string {
	if len(b) > 120 {
		return string(b[:120]) + "…"
	}
	return string(b)
}

// Stream is the event stream of one command or code execution. Close it
// when done (Collect closes it).
type Stream struct {
	body io.ReadCloser
	r    *EventReader
}

func newStream(body io.ReadCloser) *Stream {
	return &Stream{body: body, r: NewEventReader(body)}
}

// NewStream returns a Stream reading events from body, which Close
// closes.
func NewStream(body io.ReadCloser) *Stream { return newStream(body) }

// Next returns the next event, or io.EOF after the last one.
//
// # Errors
// See EventReader.Next; when the request's context ends, its error.
func (s *Stream) Next() (Event, error) { return s.r.Next() }

// Close releases the stream's connection.
//
// # Errors
// Those of closing the response body.
func (s *Stream) Close() error { return s.body.Close() }

// Execution is the outcome of a stream, gathered by Collect.
type Execution struct {
	ID             string           // text of the init event
	ExecutionCount int              // last execution_count seen
	ExecutionTime  int64            // ms, from execution_complete
	Stdout         []string         // texts of stdout events, in order
	Stderr         []string         // texts of stderr events, in order
	Results        []map[string]any // results of result events, in order
	Error          *ExecError       // the error event, if any
	Complete       bool             // execution_complete arrived
}

// ExitCode returns the exit code of a command: 0 when it completed, the
// code of a CommandExecError, and ok=false when the execution failed in
// another way (such as a timeout) or did not finish.
func (x *Execution) ExitCode() (code int, ok bool) {
	if x.Error != nil {
		if x.Error.EName == CommandExecError {
			if n, err := strconv.Atoi(x.Error.EValue); err == nil {
				return n, true
			}
		}
		return 0, false
	}
	if x.Complete {
		return 0, true
	}
	return 0, false
}

// Collect reads the stream to its end, calls onEvent (if not nil) for every
// event as it arrives, closes the stream and returns what happened. A
// failed execution is not an error of Collect: see Execution.Error.
//
// # Errors
// ErrIncomplete when the stream ended without execution_complete or
// error; stream read or parse errors. The partial Execution is returned
// with every error.
func (s *Stream) Collect(onEvent func(Event)) (*Execution, error) {
	defer s.Close()
	x := &Execution{}
	for {
		ev, err := s.Next()
		if errors.Is(err, io.EOF) {
			if x.Complete || x.Error != nil {
				return x, nil
			}
			return x, ErrIncomplete
		}
		if err != nil {
			return x, err
		}
		switch ev.Type {
		case EventInit:
			x.ID = ev.Text
		case EventStdout:
			x.Stdout = append(x.Stdout, ev.Text)
		case EventStderr:
			x.Stderr = append(x.Stderr, ev.Text)
		case EventResult:
			x.Results = append(x.Results, ev.Results)
		case EventError:
			x.Error = ev.Error
			if x.Error == nil {
				x.Error = &ExecError{EName: "Error", EValue: ev.Text}
			}
		case EventExecutionComplete:
			x.Complete = true
			x.ExecutionTime = ev.ExecutionTime
		}
		if ev.ExecutionCount > 0 {
			x.ExecutionCount = ev.ExecutionCount
		}
		if onEvent != nil {
			onEvent(ev)
		}
	}
}
