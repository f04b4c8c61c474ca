package gocell

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
)

// positions parses a program and returns, for every call expression, the
// called function's name and where the generated file's //line directives
// put it ("<cell-N>:LINE:COL").
func positions(t *testing.T, src []byte) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "main.go", src, 0)
	if err != nil {
		t.Fatalf("the program does not parse: %v\n%s", err, src)
	}
	out := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok {
			name := ""
			switch fn := c.Fun.(type) {
			case *ast.Ident:
				name = fn.Name
			case *ast.SelectorExpr:
				name = fn.Sel.Name
			}
			p := fset.Position(c.Pos())
			out[name] = p.Filename + ":" + itoa(p.Line) + ":" + itoa(p.Column)
		}
		return true
	})
	return out
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestPrepare(t *testing.T) {
	tests := []struct {
		name    string
		cells   []string // committed in order; the last one is checked
		has     []string // lines the last program has
		hasNot  []string // lines it must not have
		at      map[string]string
		hasMain bool
	}{
		{
			name:    "mixed cell",
			cells:   []string{"import \"fmt\"\n\nfunc sq(n int) int { return n * n }\nx := sq(3)\nfmt.Println(x)"},
			has:     []string{`import "fmt"`, "func sq(n int) int { return n * n }", "x := sq(3)"},
			at:      map[string]string{"sq": "<cell-1>:4:6", "Println": "<cell-1>:5:1"},
			hasMain: true,
		},
		{
			name:  "declarations are remembered, statements are not",
			cells: []string{"import \"fmt\"\nfunc f() {}\nfmt.Println(1)", "f()"},
			has:   []string{"func f() {}", "f()"},
			// fmt is remembered but unused here: dropped from this program
			hasNot:  []string{"fmt.Println(1)", `import "fmt"`},
			at:      map[string]string{"f": "<cell-2>:1:1"},
			hasMain: true,
		},
		{
			name:    "a later declaration replaces an earlier one",
			cells:   []string{"func f() int { return 1 }\nvar v = 1", "func f() int { return 2 }\nvar v = 2\n_ = f() + v"},
			has:     []string{"func f() int { return 2 }", "var v = 2"},
			hasNot:  []string{"return 1", "var v = 1"},
			hasMain: true,
		},
		{
			name:   "declarations only",
			cells:  []string{"type T struct{ A int }\nfunc (t *T) Get() int { return t.A }\nconst (\n\tA = iota\n\tB\n)"},
			has:    []string{"type T struct{ A int }", "func (t *T) Get() int { return t.A }", "\tB\n)"},
			hasNot: []string{"x"},
		},
		{
			name:   "methods are named by their type",
			cells:  []string{"type T int\nfunc (T) M() int { return 1 }\nfunc (T) N() int { return 2 }", "func (t T) M() int { return 3 }"},
			has:    []string{"func (T) N() int { return 2 }", "func (t T) M() int { return 3 }"},
			hasNot: []string{"return 1"},
		},
		{
			name:   "a var group is split by name",
			cells:  []string{"var (\n\ta = 1\n\tb = 2\n)", "var a = 3"},
			has:    []string{"var b = 2", "var a = 3"},
			hasNot: []string{"a = 1"},
		},
		{
			name:    "a for clause stays one statement",
			cells:   []string{"import \"fmt\"\nfor i := 0; i < 2; i++ {\n\tfmt.Println(i)\n}"},
			has:     []string{"for i := 0; i < 2; i++ {"},
			at:      map[string]string{"Println": "<cell-1>:3:2"},
			hasMain: true,
		},
		{
			name:    "a func literal call is a statement",
			cells:   []string{"func() { println(1) }()"},
			has:     []string{"func main() {", "func() { println(1) }()"},
			hasMain: true,
		},
		{
			name:    "own main",
			cells:   []string{"import \"fmt\"\nfunc main() {\n\tfmt.Println(1)\n}"},
			has:     []string{"func main() {", `import "fmt"`},
			hasNot:  []string{"<generated>"},
			at:      map[string]string{"Println": "<cell-1>:3:2"},
			hasMain: true,
		},
		{
			name:    "a pasted program's package clause is dropped",
			cells:   []string{"package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(1)\n}"},
			has:     []string{`import "fmt"`, "func main() {"},
			hasNot:  []string{"package main\n\n//line <cell-1>:1"},
			at:      map[string]string{"Println": "<cell-1>:6:2"},
			hasMain: true,
		},
		{
			name:    "aliased and versioned imports",
			cells:   []string{"import (\n\tr \"math/rand\"\n\t\"math/rand/v2\"\n\t_ \"embed\"\n\t\"strings\"\n)\n_ = r.Int() + rand.Int()"},
			has:     []string{`import r "math/rand"`, `import "math/rand/v2"`, `import _ "embed"`},
			hasNot:  []string{`"strings"`},
			hasMain: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s Session
			var p *Program
			for _, c := range tt.cells {
				var err error
				if p, err = s.Prepare(c); err != nil {
					t.Fatal(err)
				}
				p.Commit()
			}
			src := string(p.Source)
			for _, want := range tt.has {
				if !strings.Contains(src, want) {
					t.Errorf("the program lacks %q:\n%s", want, src)
				}
			}
			for _, bad := range tt.hasNot {
				if strings.Contains(src, bad) {
					t.Errorf("the program has %q:\n%s", bad, src)
				}
			}
			got := positions(t, p.Source)
			for fn, want := range tt.at {
				if got[fn] != want {
					t.Errorf("%s is at %q, want %q\n%s", fn, got[fn], want, src)
				}
			}
			if p.HasMain != tt.hasMain {
				t.Errorf("HasMain %v, want %v", p.HasMain, tt.hasMain)
			}
		})
	}
}

func TestUncommittedCellChangesNothing(t *testing.T) {
	var s Session
	p, _ := s.Prepare("func f() int { return 1 }")
	p.Commit()
	if _, err := s.Prepare("func f() int { return \"no\" }"); err != nil {
		t.Fatal(err)
	}
	p, _ = s.Prepare("_ = f()")
	if !strings.Contains(string(p.Source), "return 1") || strings.Contains(string(p.Source), "no") {
		t.Fatalf("an uncommitted cell changed the session:\n%s", p.Source)
	}
	if !strings.Contains(string(p.Source), "<cell-2>") {
		t.Fatalf("cells are numbered by commits:\n%s", p.Source)
	}
}

func TestMainWithStatements(t *testing.T) {
	var s Session
	if _, err := s.Prepare("func main() {}\nprintln(1)"); err == nil || !strings.Contains(err.Error(), "<cell-1>:2") {
		t.Fatalf("main with statements: %v", err)
	}
}

func TestDropImport(t *testing.T) {
	var s Session
	p, _ := s.Prepare("import y \"gopkg.in/yaml.v3\"\nimport \"example.com/odd-name\"\nprintln(1)")
	if !strings.Contains(string(p.Source), "odd-name") {
		t.Fatalf("a guessed-unused import is dropped only on the compiler's word:\n%s", p.Source)
	}
	msg := "# command-line-arguments\n<cell-1>:2:8: \"example.com/odd-name\" imported as other and not used\n"
	path, err := ImportNotUsed(msg)
	if err != nil || path != "example.com/odd-name" {
		t.Fatalf("ImportNotUsed: %q %v", path, err)
	}
	if !p.DropImport(path) || strings.Contains(string(p.Source), "odd-name") {
		t.Fatalf("DropImport:\n%s", p.Source)
	}
	if p.DropImport(path) {
		t.Fatal("dropped twice")
	}
	p.Commit()
	p, _ = s.Prepare("println(2)")
	if strings.Contains(string(p.Source), "odd-name") {
		t.Fatalf("a dropped import came back:\n%s", p.Source)
	}
	if _, err := ImportNotUsed("<cell-1>:1:1: undefined: x"); err != ErrNoUnusedImport {
		t.Fatalf("no unused import: %v", err)
	}
}

func FuzzPrepare(f *testing.F) {
	for _, s := range []string{"import \"fmt\"\nfmt.Println(1)", "func f() {}\nf()", "var (\na = 1\n)", "for {\n}", "}}}(((", "func main() {}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, cell string) {
		var s Session
		p, err := s.Prepare(cell)
		if err != nil {
			return
		}
		if !strings.HasPrefix(string(p.Source), "package main\n") {
			t.Fatalf("no package clause:\n%s", p.Source)
		}
		p.Commit()
	})
}
