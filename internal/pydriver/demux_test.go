package pydriver

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// collect feeds chunks to a demuxer and returns its stdout and frames.
func collect(chunks [][]byte, maxFrame int) (stdout string, frames []string, tooLong int) {
	var out bytes.Buffer
	d := &Demuxer{
		Stdout:   func(p []byte) { out.Write(p) },
		Frame:    func(b []byte) { frames = append(frames, string(b)) },
		MaxFrame: maxFrame,
		TooLong:  func() { tooLong++ },
	}
	for _, c := range chunks {
		if n, err := d.Write(c); n != len(c) || err != nil {
			panic("short write")
		}
	}
	return out.String(), frames, tooLong
}

// splitEvery cuts s into chunks of n bytes.
func splitEvery(s string, n int) [][]byte {
	var out [][]byte
	for len(s) > n {
		out = append(out, []byte(s[:n]))
		s = s[n:]
	}
	return append(out, []byte(s))
}

func TestDemuxer(t *testing.T) {
	const M = Magic
	cases := []struct {
		name     string
		stream   string
		maxFrame int
		stdout   string
		frames   []string
		tooLong  int
	}{
		{name: "plain output", stream: "hello\nworld", stdout: "hello\nworld"},
		{name: "one frame", stream: M + `{"type":"done"}` + "\n", frames: []string{`{"type":"done"}`}},
		{name: "output around frames", stream: "a" + M + "1\nb\n" + M + "2\nc", stdout: "ab\nc", frames: []string{"1", "2"}},
		{name: "NUL bytes are output", stream: "x\x00y\x00\x1bHYBOZ\x00z", stdout: "x\x00y\x00\x1bHYBOZ\x00z"},
		{name: "magic prefix then frame", stream: "\x00\x1bHY" + M + "f\n", stdout: "\x00\x1bHY", frames: []string{"f"}},
		{name: "empty frame", stream: M + "\n", frames: []string{""}},
		{name: "frame too long", stream: M + strings.Repeat("z", 20) + "\nafter" + M + "ok\n", maxFrame: 10, stdout: "after", frames: []string{"ok"}, tooLong: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Any split of the stream must give the same result.
			for n := 1; n <= len(c.stream); n++ {
				stdout, frames, tooLong := collect(splitEvery(c.stream, n), c.maxFrame)
				if stdout != c.stdout || !slices.Equal(frames, c.frames) || tooLong != c.tooLong {
					t.Fatalf("chunks of %d: stdout %q frames %q tooLong %d; want %q %q %d",
						n, stdout, frames, tooLong, c.stdout, c.frames, c.tooLong)
				}
			}
		})
	}
}

// TestDemuxerForwardsEagerly checks that output is not held back longer than
// needed: a chunk without a NUL is forwarded in the same Write.
func TestDemuxerForwardsEagerly(t *testing.T) {
	var got []string
	d := &Demuxer{Stdout: func(p []byte) { got = append(got, string(p)) }, Frame: func([]byte) {}}
	_, _ = d.Write([]byte("early"))
	if !slices.Equal(got, []string{"early"}) {
		t.Fatalf("after one write: %q", got)
	}
	_, _ = d.Write([]byte("tail\x00"))
	if !slices.Equal(got, []string{"early", "tail"}) {
		t.Fatalf("possible magic start not held back alone: %q", got)
	}
	_, _ = d.Write([]byte("more"))
	if !slices.Equal(got, []string{"early", "tail", "\x00", "more"}) {
		t.Fatalf("held byte not released: %q", got)
	}
}

func FuzzDemuxer(f *testing.F) {
	f.Add([]byte("hello\x00world"), []byte(`{"type":"done"}`), uint8(3))
	f.Add([]byte("\x00\x1bHYB"), []byte("x"), uint8(1))
	f.Fuzz(func(t *testing.T, out, body []byte, split uint8) {
		// Output may contain anything but a full magic; frame bodies no newline.
		if bytes.Contains(out, []byte(Magic)) || bytes.IndexByte(body, '\n') >= 0 {
			t.Skip()
		}
		stream := string(out) + Magic + string(body) + "\n" + string(out) + Magic + "end\n"
		stdout, frames, _ := collect(splitEvery(stream, int(split)+1), 0)
		if stdout != string(out)+string(out) {
			t.Fatalf("stdout %q, want %q", stdout, string(out)+string(out))
		}
		if !slices.Equal(frames, []string{string(body), "end"}) {
			t.Fatalf("frames %q, want [%q end]", frames, body)
		}
	})
}
