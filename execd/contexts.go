package execd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// Code contexts of the languages that execd builds on the executor's own:
// TypeScript (transpiled, then run by a JavaScript interpreter) and Bash (a
// persistent shell session). Every other language is the executor's.

// Transpiler turns the cells of a language the executor does not run into
// JavaScript (TypeScript: internal/typescript, with esbuild).
type Transpiler interface {
	// Transpile returns the JavaScript of cell and a function that maps the
	// positions of the cell's code named in a line of a JavaScript
	// traceback (`<repl>:LINE:COL`, `<cell-N>:LINE:COL`) back to cell's.
	//
	// # Errors
	// A *SyntaxError when cell does not parse.
	Transpile(cell string) (js string, mapBack func(line string) string, err error)
}

// SyntaxError is a cell a Transpiler could not parse, at the cell's
// position (1-based).
type SyntaxError struct {
	Line, Column int
	Message      string
	Source       string // the offending line of the cell, if known
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("%s (line %d, column %d)", e.Message, e.Line, e.Column)
}

// engine is the executor language that runs language.
func engine(language string) string {
	if language == "typescript" {
		return "javascript"
	}
	return language
}

// newInterpreter starts the interpreter of a context of language.
//
// # Errors
// The executor's, from NewInterpreter or NewSession.
func (m *codeManager) newInterpreter(ctx context.Context, language, cwd string) (Interpreter, error) {
	switch language {
	case "bash":
		s, err := m.h.opts.Executor.NewSession(ctx, cwd, nil)
		if err != nil {
			return nil, err
		}
		return &shellInterpreter{s: s}, nil
	case "typescript":
		js, err := m.h.opts.Executor.NewInterpreter(ctx, "javascript", cwd)
		if err != nil {
			return nil, err
		}
		return &tsInterpreter{js: js, tr: m.h.opts.TypeScript}, nil
	}
	return m.h.opts.Executor.NewInterpreter(ctx, language, cwd)
}

// tsInterpreter runs TypeScript cells in a JavaScript interpreter: each
// cell is transpiled by esbuild (types stripped, not checked), and the
// positions of an exception's traceback are mapped back to the cell's
// TypeScript lines.
type tsInterpreter struct {
	js Interpreter
	tr Transpiler
}

// Run implements Interpreter. A cell that does not parse is a SyntaxError
// at its TypeScript line and column; it does not reach the interpreter.
func (t *tsInterpreter) Run(ctx context.Context, code string, out Output) (*ExecError, error) {
	js, mapBack, err := t.tr.Transpile(code)
	var se *SyntaxError
	if errors.As(err, &se) {
		tb := []string{fmt.Sprintf("SyntaxError: %s (<typescript>:%d:%d)", se.Message, se.Line, se.Column)}
		if se.Source != "" {
			tb = append(tb, "    "+se.Source, "    "+strings.Repeat(" ", se.Column-1)+"^")
		}
		return &ExecError{EName: "SyntaxError", EValue: se.Error(), Traceback: tb}, nil
	}
	if err != nil {
		return nil, err
	}
	ee, err := t.js.Run(ctx, js, out)
	if ee != nil {
		mapped := *ee
		mapped.EValue = mapBack(ee.EValue)
		mapped.Traceback = make([]string, len(ee.Traceback))
		for i, l := range ee.Traceback {
			mapped.Traceback[i] = mapBack(l)
		}
		ee = &mapped
	}
	return ee, err
}

// Close implements Interpreter.
func (t *tsInterpreter) Close() error { return t.js.Close() }

// shellInterpreter runs Bash cells in one shell session, so variables,
// functions and the working directory persist between cells. A non-zero
// exit status is a CommandExecError whose value is the status.
type shellInterpreter struct{ s Session }

// Run implements Interpreter.
func (sh *shellInterpreter) Run(ctx context.Context, code string, out Output) (*ExecError, error) {
	// The session may write stdout and stderr from two goroutines; out
	// takes one at a time, and nothing after Run returns.
	var mu sync.Mutex
	done := false
	writer := func(f func([]byte)) writerFunc {
		return func(p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			if !done {
				f(append([]byte(nil), p...))
			}
			return len(p), nil
		}
	}
	code0, err := sh.s.Run(ctx, code, writer(out.Stdout), writer(out.Stderr))
	mu.Lock()
	done = true
	mu.Unlock()
	if err != nil {
		switch {
		case ctx.Err() == nil || errors.Is(err, ErrContextLost):
			// the shell ended (an `exit` in a container's bash, a crash)
			return nil, fmt.Errorf("execd: bash: %w: %w", err, ErrContextLost)
		case errors.Is(err, ErrTimeout) || errors.Is(err, ErrInterrupted):
			return nil, err
		default:
			return nil, fmt.Errorf("execd: bash: %w", context.Cause(ctx))
		}
	}
	if code0 != 0 {
		return &ExecError{EName: "CommandExecError", EValue: strconv.Itoa(code0), Traceback: []string{}}, nil
	}
	return nil, nil
}

// Close implements Interpreter.
func (sh *shellInterpreter) Close() error { return sh.s.Close() }
