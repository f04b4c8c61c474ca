package typescript

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/hybox-dev/hybox/execd"
)

func TestTranspile(t *testing.T) {
	tests := []struct {
		name, src string
		want      []string // substrings of the JavaScript
		absent    []string
	}{
		{name: "annotations stripped", src: "const n: number = 41\nn + 1",
			want: []string{"const n = 41;", "n + 1;"}, absent: []string{": number"}},
		{name: "interfaces and type aliases removed", src: "interface P {\n  x: number\n}\ntype Q = P | null\nconst p: P = { x: 1 }\np.x",
			want: []string{"const p = { x: 1 };"}, absent: []string{"interface", "type Q"}},
		{name: "enum lowered", src: "enum Color { Red, Green }\nColor.Green",
			want: []string{"var Color =", `Color2["Green"] = 1`}},
		{name: "top-level await kept", src: "const v: number = await Promise.resolve(2)\nv",
			want: []string{"await Promise.resolve(2)"}},
		{name: "generics and as", src: "function id<T>(x: T): T { return x }\nid<string>('a' as string)",
			want: []string{"function id(x)", "id(\"a\");"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Transpile(tt.src, "<cell>")
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(p.JS, w) {
					t.Errorf("JS %q lacks %q", p.JS, w)
				}
			}
			for _, a := range tt.absent {
				if strings.Contains(p.JS, a) {
					t.Errorf("JS %q has %q", p.JS, a)
				}
			}
		})
	}
}

func TestSyntaxErrorPosition(t *testing.T) {
	_, err := Transpile("type T = {\n  a: string\n}\nconst x: T = {a: 'b'}\nlet y = = 2\n", "<cell>")
	var se *execd.SyntaxError
	if !errors.As(err, &se) {
		t.Fatalf("err %v, want a *SyntaxError", err)
	}
	if se.Line != 5 || se.Column != 9 || se.Source != "let y = = 2" || se.Message == "" {
		t.Fatalf("got %+v, want line 5 column 9", se)
	}
}

// TestPositionsMapBack: lines of the JavaScript map to the TypeScript lines
// they came from, though esbuild drops the type-only lines between them.
func TestPositionsMapBack(t *testing.T) {
	src := "interface Point {\n  x: number\n  y: number\n}\n\nconst p: Point = { x: 1, y: 2 }\nfunction boom(q: Point | null): number {\n  return (q as any).z.w\n}\nboom(p)\n"
	p, err := Transpile(src, "<cell>")
	if err != nil {
		t.Fatal(err)
	}
	js := strings.Split(p.JS, "\n")
	find := func(s string) int {
		for i, l := range js {
			if strings.Contains(l, s) {
				return i + 1
			}
		}
		t.Fatalf("JS %q lacks %q", p.JS, s)
		return 0
	}
	for _, c := range []struct {
		js      string
		tsLine  int
		tsColOf string
	}{
		{"const p", 6, "const p"},
		{"return q.z.w", 8, "return"},
		{"boom(p);", 10, "boom(p)"},
	} {
		line := find(c.js)
		col := strings.Index(js[line-1], strings.Fields(c.js)[0]) + 1
		sl, sc, ok := p.Position(line, col)
		wantCol := strings.Index(strings.Split(src, "\n")[c.tsLine-1], c.tsColOf) + 1
		if !ok || sl != c.tsLine || sc != wantCol {
			t.Errorf("JS %d:%d (%q) → %d:%d %v, want %d:%d", line, col, c.js, sl, sc, ok, c.tsLine, wantCol)
		}
	}
	// A stack trace's positions are rewritten; other files are not.
	jsLine := find("return q.z.w")
	text := "TypeError: cannot read property 'w' of undefined\n    at boom (<repl>:" + strconv.Itoa(jsLine) + ":10)\n    at other.js:" + strconv.Itoa(jsLine) + ":3"
	got := p.Rewrite(text, regexp.MustCompile(`<repl>|<cell-\d+>`))
	if !strings.Contains(got, "at boom (<repl>:8:") || !strings.Contains(got, "other.js:"+strconv.Itoa(jsLine)+":3") {
		t.Errorf("rewritten %q", got)
	}
	if p.Rewrite("<cell-3>:999", regexp.MustCompile(`<cell-\d+>`)) != "<cell-3>:999" {
		t.Error("a line beyond the program changed")
	}
}

func TestVLQ(t *testing.T) {
	tests := []struct {
		in   string
		want []int
	}{
		{"AAAA", []int{0, 0, 0, 0}},
		{"AACA", []int{0, 0, 1, 0}},
		{"D", []int{-1}},
		{"gB", []int{16}},
		{"2HwcrxB", []int{123, 456, -789}},
	}
	for _, tt := range tests {
		got, err := vlq(tt.in)
		if err != nil || len(got) != len(tt.want) {
			t.Fatalf("vlq(%q) = %v, %v, want %v", tt.in, got, err, tt.want)
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Fatalf("vlq(%q) = %v, want %v", tt.in, got, tt.want)
			}
		}
	}
	for _, bad := range []string{"g", "A!"} {
		if _, err := vlq(bad); err == nil {
			t.Errorf("vlq(%q) succeeded", bad)
		}
	}
}
