// Package gocell turns the cells of a Go code context into whole programs,
// as gonb (the Go kernel of OpenSandbox's code interpreter) does: a Go
// context keeps its state as declarations, not as live values. Each cell is
// split at its top-level statements; imports and declarations of funcs,
// methods, types, vars and consts are remembered by name across cells (a
// later declaration of a name replaces the earlier one), and the cell's
// other statements are the body of main for that run only. A cell that
// declares func main runs that main. Every run is a fresh program: a var's
// value does not survive a cell, its declaration (and so its initializer)
// does.
//
// The generated source carries //line directives, so the compiler's errors
// and a panic's stack trace name the cells' own lines ("<cell-3>:2:5").
package gocell

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// decl is one remembered top-level declaration.
type decl struct {
	names []string // the names it declares ("T.M" for a method)
	src   string   // its source, starting with its keyword
	pos   position
	isImp bool
	pkg   string // for an import: the name it binds ("" = by the path's guess)
	path  string // for an import: the import path
}

// position is where a chunk starts in a cell.
type position struct {
	file      string // "<cell-N>"
	line, col int
}

func (p position) directive() string {
	return fmt.Sprintf("//line %s:%d:%d\n", p.file, p.line, p.col)
}

// Session is the remembered state of one Go context. Its zero value is a
// context with no declarations. A Session is used by one goroutine at a time.
type Session struct {
	decls []decl
	cells int
}

// Program is the Go source of one cell's run.
type Program struct {
	// Source is the whole program (package main).
	Source []byte
	// HasMain reports whether the program does anything when run: the cell
	// had statements or declared func main.
	HasMain bool

	s          *Session
	decls      []decl // the session's declarations once this cell is committed
	cells      int
	bodyChunks []chunk
	main       *decl
}

// Commit remembers the cell's declarations (call it once the program
// compiled).
func (p *Program) Commit() {
	p.s.decls = p.decls
	p.s.cells = p.cells
}

// DropImport removes the import of path from the program (and from what
// Commit remembers) and regenerates Source. It reports whether there was
// such an import.
func (p *Program) DropImport(importPath string) bool {
	i := slices.IndexFunc(p.decls, func(d decl) bool { return d.isImp && d.path == importPath })
	if i < 0 {
		return false
	}
	p.decls = slices.Delete(slices.Clone(p.decls), i, i+1)
	p.Source = generate(p.decls, p.bodyChunks, p.main)
	return true
}

// Prepare splits cell into declarations and statements and returns the
// program that runs it after the remembered declarations. The session
// changes only on Commit.
//
// # Errors
// When the cell declares func main and also has statements outside
// functions.
func (s *Session) Prepare(cell string) (*Program, error) {
	n := s.cells + 1
	file := fmt.Sprintf("<cell-%d>", n)
	decls := slices.Clone(s.decls)
	var body []chunk
	var main *decl
	for _, c := range split(cell, file) {
		if strings.HasPrefix(c.src, "package ") {
			continue // a whole program pasted into a cell
		}
		ds, ok := parseDecls(c)
		if !ok {
			body = append(body, c)
			continue
		}
		for _, d := range ds {
			if !d.isImp && len(d.names) == 1 && d.names[0] == "main" {
				dd := d
				main = &dd
				continue
			}
			decls = replace(decls, d)
		}
	}
	if main != nil && len(body) > 0 {
		return nil, fmt.Errorf("%s:%d: a cell that declares func main cannot also have statements outside functions", file, body[0].pos.line)
	}
	p := &Program{s: s, decls: decls, cells: n, HasMain: main != nil || len(body) > 0}
	p.bodyChunks, p.main = body, main
	p.Source = generate(decls, body, main)
	return p, nil
}

// replace adds d to decls, dropping every earlier declaration of one of its
// names (or an import of the same path or name).
func replace(decls []decl, d decl) []decl {
	out := decls[:0:0]
	for _, old := range decls {
		clash := false
		if d.isImp {
			clash = old.isImp && (old.path == d.path || (d.pkg != "" && old.pkg == d.pkg))
		} else if !old.isImp {
			for _, n := range d.names {
				if slices.Contains(old.names, n) {
					clash = true
				}
			}
		}
		if !clash {
			out = append(out, old)
		}
	}
	return append(out, d)
}

// chunk is one top-level statement of a cell.
type chunk struct {
	src string
	pos position
}

// split cuts cell into its top-level statements: it scans the tokens and
// cuts at every line end outside brackets that ends a statement (where Go
// inserts a semicolon). Statements on one line separated by ";" stay one
// chunk, which keeps a for clause whole.
func split(cell, file string) []chunk {
	fset := token.NewFileSet()
	f := fset.AddFile(file, -1, len(cell))
	var sc scanner.Scanner
	sc.Init(f, []byte(cell), func(token.Position, string) {}, 0)
	var out []chunk
	depth, start := 0, -1
	flush := func(end int) {
		if start < 0 {
			return
		}
		src := strings.TrimRight(cell[start:end], " \t\r\n;")
		if strings.TrimSpace(src) != "" {
			p := fset.Position(f.Pos(start))
			out = append(out, chunk{src: src, pos: position{file: file, line: p.Line, col: p.Column}})
		}
		start = -1
	}
	for {
		pos, tok, lit := sc.Scan()
		if tok == token.EOF {
			break
		}
		off := f.Offset(pos)
		switch tok {
		case token.LPAREN, token.LBRACE, token.LBRACK:
			depth++
		case token.RPAREN, token.RBRACE, token.RBRACK:
			depth--
		}
		if tok == token.SEMICOLON && lit == "\n" && depth <= 0 {
			flush(off)
			continue
		}
		if start < 0 {
			start = off
		}
	}
	flush(len(cell))
	return out
}

// parseDecls parses c as top-level declarations; ok is false when c is
// not one (a statement).
func parseDecls(c chunk) (ds []decl, ok bool) {
	first, _, _ := strings.Cut(strings.TrimSpace(c.src), " ")
	first, _, _ = strings.Cut(first, "(")
	switch first {
	case "import", "func", "type", "var", "const":
	default:
		return nil, false
	}
	fset := token.NewFileSet()
	const head = "package p\n"
	f, err := parser.ParseFile(fset, "", head+c.src, parser.ParseComments)
	if err != nil || len(f.Decls) == 0 {
		return nil, false
	}
	src := head + c.src
	text := func(n ast.Node) string {
		return src[fset.Position(n.Pos()).Offset:fset.Position(n.End()).Offset]
	}
	// at is the cell position of n, moved back by the keyword written before it.
	at := func(n ast.Node, back int) position {
		p := fset.Position(n.Pos())
		line, col := p.Line-1, p.Column // line 1 is the package clause
		if line == 1 {
			col += c.pos.col - 1
		}
		return position{file: c.pos.file, line: c.pos.line + line - 1, col: max(1, col-back)}
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			ds = append(ds, decl{names: []string{funcName(d)}, src: text(d), pos: at(d, 0)})
		case *ast.GenDecl:
			switch {
			case d.Tok == token.IMPORT:
				for _, sp := range d.Specs {
					is := sp.(*ast.ImportSpec)
					p, _ := strconv.Unquote(is.Path.Value)
					name := ""
					if is.Name != nil {
						name = is.Name.Name
					}
					ds = append(ds, decl{isImp: true, path: p, pkg: name, src: "import " + text(is), pos: at(is, len("import "))})
				}
			case d.Tok == token.CONST || !d.Lparen.IsValid():
				// a const group stays whole (iota, implicit repetition)
				ds = append(ds, decl{names: specNames(d.Specs), src: text(d), pos: at(d, 0)})
			default:
				for _, sp := range d.Specs {
					ds = append(ds, decl{names: specNames([]ast.Spec{sp}), src: d.Tok.String() + " " + text(sp), pos: at(sp, len(d.Tok.String())+1)})
				}
			}
		}
	}
	return ds, true
}

func funcName(d *ast.FuncDecl) string {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return d.Name.Name
	}
	t := d.Recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.Ident:
			return x.Name + "." + d.Name.Name
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr: // a generic type's receiver
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.ParenExpr:
			t = x.X
		default:
			return "?." + d.Name.Name
		}
	}
}

func specNames(specs []ast.Spec) []string {
	var names []string
	for _, sp := range specs {
		switch sp := sp.(type) {
		case *ast.ValueSpec:
			for _, n := range sp.Names {
				names = append(names, n.Name)
			}
		case *ast.TypeSpec:
			names = append(names, sp.Name.Name)
		}
	}
	return names
}

// generate writes the program: package main, the imports the rest uses,
// the declarations, and main (the cell's own, or one with the body).
func generate(decls []decl, body []chunk, main *decl) []byte {
	var rest bytes.Buffer
	for _, d := range decls {
		if d.isImp {
			continue
		}
		rest.WriteString(d.pos.directive())
		rest.WriteString(d.src)
		rest.WriteString("\n\n")
	}
	if main != nil {
		rest.WriteString(main.pos.directive())
		rest.WriteString(main.src)
		rest.WriteString("\n")
	} else {
		rest.WriteString("//line <generated>:1:1\nfunc main() {\n")
		for _, c := range body {
			rest.WriteString(c.pos.directive())
			rest.WriteString(c.src)
			rest.WriteString("\n")
		}
		rest.WriteString("//line <generated>:3:1\n}\n")
	}
	used := usedNames(rest.Bytes())
	var b bytes.Buffer
	b.WriteString("package main\n\n")
	for _, d := range decls {
		if !d.isImp {
			continue
		}
		if used != nil && !importUsed(d, used) {
			continue
		}
		b.WriteString(d.pos.directive())
		b.WriteString(d.src)
		b.WriteString("\n")
	}
	b.WriteString("\n")
	b.Write(rest.Bytes())
	return b.Bytes()
}

// usedNames is the set of identifiers X of every selector X.Sel in src, or
// nil when src does not parse (then every import is kept and the compiler
// reports the syntax error).
func usedNames(src []byte) map[string]bool {
	f, err := parser.ParseFile(token.NewFileSet(), "", append([]byte("package main\n"), src...), parser.SkipObjectResolution)
	if err != nil {
		return nil
	}
	used := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if s, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := s.X.(*ast.Ident); ok {
				used[id.Name] = true
			}
		}
		return true
	})
	return used
}

var majorVersion = regexp.MustCompile(`^v[0-9]+$`)

// importUsed reports whether the program refers to the package d imports.
// Blank and dot imports are always kept. Without an alias, the name of a
// standard library package is its path's last element (before a major
// version suffix); another package's name may differ from its path, so it
// is kept and left to the compiler (ImportNotUsed).
func importUsed(d decl, used map[string]bool) bool {
	switch d.pkg {
	case "_", ".":
		return true
	case "":
	default:
		return used[d.pkg]
	}
	elems := strings.Split(d.path, "/")
	if strings.Contains(elems[0], ".") {
		return true
	}
	name := elems[len(elems)-1]
	if majorVersion.MatchString(name) && len(elems) > 1 {
		name = elems[len(elems)-2]
	}
	return used[name]
}

// unusedImport matches the compiler's report of an unused import.
var unusedImport = regexp.MustCompile(`"([^"]+)" imported (?:as \w+ )?(?:and|but) not used`)

// ImportNotUsed returns the import path of the first "imported and not
// used" error in the compiler's output.
//
// # Errors
// ErrNoUnusedImport when there is none.
func ImportNotUsed(compilerOutput string) (string, error) {
	m := unusedImport.FindStringSubmatch(compilerOutput)
	if m == nil {
		return "", ErrNoUnusedImport
	}
	return m[1], nil
}

// ErrNoUnusedImport: the compiler's output names no unused import.
var ErrNoUnusedImport = errors.New("gocell: no unused import")
