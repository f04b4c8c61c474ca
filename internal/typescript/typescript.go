// Package typescript turns TypeScript code cells into JavaScript for the
// JavaScript interpreters of code contexts, with esbuild's Go API (types
// stripped, TypeScript-only syntax such as enums lowered; no type checking),
// and maps positions in the JavaScript back to the TypeScript source through
// the source map esbuild writes, so that an error names the line the user
// wrote.
package typescript

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/evanw/esbuild/pkg/api"

	"github.com/hybox-dev/hybox/execd"
)

// Program is one transpiled cell.
type Program struct {
	// JS is the JavaScript to run: a script, statement for statement the
	// cell's (the last expression stays last, so the cell's value is kept).
	JS string
	// lines[i] holds the mappings of generated line i+1, by column.
	lines [][]mapping
}

// mapping maps a generated column to a source position (all 0-based).
type mapping struct{ genCol, line, col int }

// Transpiler is the execd.Transpiler of typescript code contexts.
type Transpiler struct{}

var _ execd.Transpiler = Transpiler{}

// cellFiles are the names the JavaScript interpreters give a cell in stack
// traces: `<repl>` (QuickJS in wasm), `<cell-N>` (node's vm in containers).
var cellFiles = regexp.MustCompile(`<repl>|<cell-\d+>`)

// Transpile implements execd.Transpiler.
//
// # Errors
// An *execd.SyntaxError when cell does not parse.
func (Transpiler) Transpile(cell string) (string, func(string) string, error) {
	p, err := Transpile(cell, "<typescript>")
	if err != nil {
		return "", nil, err
	}
	return p.JS, func(line string) string { return p.Rewrite(line, cellFiles) }, nil
}

// Transpile transpiles src, a TypeScript cell named filename in messages.
//
// # Errors
// An *execd.SyntaxError (the first error, at its TypeScript position) when
// src does not parse; an error when esbuild's source map cannot be read (a
// bug).
func Transpile(src, filename string) (*Program, error) {
	r := api.Transform(src, api.TransformOptions{
		Loader:     api.LoaderTS,
		Sourcefile: filename,
		Sourcemap:  api.SourceMapExternal,
		Target:     api.ESNext,
		LogLevel:   api.LogLevelSilent,
	})
	if len(r.Errors) > 0 {
		m := r.Errors[0]
		e := &execd.SyntaxError{Message: m.Text, Line: 1, Column: 1}
		if m.Location != nil {
			e.Line, e.Column, e.Source = m.Location.Line, m.Location.Column+1, m.Location.LineText
		}
		return nil, e
	}
	var sm struct {
		Mappings string `json:"mappings"`
	}
	if err := json.Unmarshal(r.Map, &sm); err != nil {
		return nil, fmt.Errorf("typescript: esbuild's source map: %w", err)
	}
	lines, err := decodeMappings(sm.Mappings)
	if err != nil {
		return nil, fmt.Errorf("typescript: esbuild's source map: %w", err)
	}
	return &Program{JS: string(r.Code), lines: lines}, nil
}

// Position maps a 1-based line and column of the JavaScript to the
// TypeScript source (1-based). ok is false for a line with no mapping
// (esbuild's helper code).
func (p *Program) Position(line, col int) (srcLine, srcCol int, ok bool) {
	if line < 1 || line > len(p.lines) || len(p.lines[line-1]) == 0 {
		return 0, 0, false
	}
	ms := p.lines[line-1]
	// the last mapping at or before the column; the line's first without one
	i := sort.Search(len(ms), func(i int) bool { return ms[i].genCol > col-1 }) - 1
	if i < 0 {
		i = 0
	}
	return ms[i].line + 1, ms[i].col + 1, true
}

// Rewrite replaces each `FILE:LINE[:COL]` of text whose FILE matches files
// (the names the interpreter gives the cell) with the TypeScript position.
// Positions without a mapping are kept.
func (p *Program) Rewrite(text string, files *regexp.Regexp) string {
	re := regexp.MustCompile(`(` + files.String() + `):(\d+)(?::(\d+))?`)
	return re.ReplaceAllStringFunc(text, func(m string) string {
		sub := re.FindStringSubmatch(m)
		line, _ := strconv.Atoi(sub[2])
		col := 1
		if sub[3] != "" {
			col, _ = strconv.Atoi(sub[3])
		}
		sl, sc, ok := p.Position(line, col)
		if !ok {
			return m
		}
		if sub[3] == "" {
			return fmt.Sprintf("%s:%d", sub[1], sl)
		}
		return fmt.Sprintf("%s:%d:%d", sub[1], sl, sc)
	})
}

// decodeMappings decodes a source map's "mappings" (version 3: lines
// separated by ';', segments by ',', each segment base64 VLQ numbers:
// generated column, then source index, source line, source column, name
// index, the generated column relative within a line and the others across
// the whole map).
func decodeMappings(s string) ([][]mapping, error) {
	var lines [][]mapping
	var srcLine, srcCol int
	for _, l := range strings.Split(s, ";") {
		var ms []mapping
		genCol := 0
		for _, seg := range strings.Split(l, ",") {
			if seg == "" {
				continue
			}
			f, err := vlq(seg)
			if err != nil {
				return nil, err
			}
			genCol += f[0]
			if len(f) < 4 {
				continue // a segment with no source
			}
			srcLine += f[2]
			srcCol += f[3]
			ms = append(ms, mapping{genCol: genCol, line: srcLine, col: srcCol})
		}
		sort.SliceStable(ms, func(i, j int) bool { return ms[i].genCol < ms[j].genCol })
		lines = append(lines, ms)
	}
	return lines, nil
}

const b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

// vlq decodes the base64 VLQ numbers of one segment.
func vlq(seg string) ([]int, error) {
	var out []int
	v, shift := 0, 0
	for i := 0; i < len(seg); i++ {
		d := strings.IndexByte(b64, seg[i])
		if d < 0 {
			return nil, fmt.Errorf("bad character %q in mapping %q", seg[i], seg)
		}
		v |= (d & 31) << shift
		if d&32 != 0 {
			shift += 5
			if shift > 30 {
				return nil, fmt.Errorf("mapping %q: number too long", seg)
			}
			continue
		}
		n := v >> 1
		if v&1 != 0 {
			n = -n
		}
		out = append(out, n)
		v, shift = 0, 0
	}
	if shift != 0 {
		return nil, fmt.Errorf("mapping %q ends inside a number", seg)
	}
	return out, nil
}
