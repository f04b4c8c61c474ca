package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// MaxEventBytes bounds one event of a stream as ReadEvents reads it.
const MaxEventBytes = 64 << 20

// ReadEvents reads a command or code stream (text/event-stream as execd
// writes it: each event one JSON object followed by a blank line; a
// "data:" prefix is accepted too) and calls yield with each event, in
// order, until the stream ends or yield returns false.
//
// # Errors
// A read error of r, or an event that is not a JSON Event object.
func ReadEvents(r io.Reader, yield func(Event) bool) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxEventBytes)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if rest, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			line = bytes.TrimSpace(rest)
		}
		if len(line) == 0 || line[0] == ':' {
			continue
		}
		var ev Event
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("stream: malformed event %.80q: %w", line, err)
		}
		if !yield(ev) {
			return nil
		}
	}
	return sc.Err()
}
