// Package pydriver holds the persistent-context Python driver shared by the
// wasm guest (runtimes/wasm/pyguest) and the OS-process backend
// (execd/osbackend), and the host side of its framing: requests written to
// the driver's stdin and control frames demultiplexed from its stdout.
//
// The driver is run as `python3 -u -c <Source>`. A request is
// "<kind> <decimal byte length>\n<payload>" (AppendRequest); the driver
// answers with user output interleaved with control frames, each Magic, one
// line of ASCII JSON (a Frame) and "\n" (Demuxer separates them).
package pydriver

import (
	_ "embed"
	"strconv"
)

// Source is the driver script (driver.py).
//
//go:embed driver.py
var Source string

// Magic starts every control frame the driver writes on fd 1. It must match
// MAGIC in driver.py. Its first byte (NUL) occurs nowhere else in it, which
// keeps the partial-match logic of Demuxer simple.
const Magic = "\x00\x1bHYBOX\x1d"

// Frame types.
const (
	FrameReady  = "ready"  // once, after start-up
	FrameResult = "result" // Data holds the MIME bundle of a value
	FrameError  = "error"  // EName, EValue, Traceback describe an exception
	FrameDone   = "done"   // end of one exec request
)

// Frame is one control frame from the driver.
type Frame struct {
	Type      string            `json:"type"`
	Data      map[string]string `json:"data"`
	EName     string            `json:"ename"`
	EValue    string            `json:"evalue"`
	Traceback []string          `json:"traceback"`
}

// Request kinds.
const (
	// RequestInit carries {"cwd","env"} (JSON); the driver does not answer.
	RequestInit = "init"
	// RequestExec carries a cell's source; the driver answers with frames
	// ending in a FrameDone.
	RequestExec = "exec"
)

// AppendRequest appends one request, "<kind> <length>\n<payload>", to dst.
func AppendRequest(dst []byte, kind string, payload []byte) []byte {
	dst = append(dst, kind...)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(len(payload)), 10)
	dst = append(dst, '\n')
	return append(dst, payload...)
}
