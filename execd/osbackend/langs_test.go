package osbackend

import (
	"context"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hybox-dev/hybox/execd"
)

// cellStep is one cell of a context test and what it must give.
type cellStep struct {
	name   string
	code   string
	stdout string
	stderr string
	result string
	ename  string
	evalue string // a substring of the error's value
}

// runSteps runs steps in order in it.
func runSteps(t *testing.T, it execd.Interpreter, steps []cellStep) {
	t.Helper()
	for _, st := range steps {
		var out output
		ee, err := it.Run(context.Background(), st.code, &out)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		result := ""
		if len(out.results) > 0 {
			result = out.results[len(out.results)-1]["text/plain"]
		}
		ename, evalue := "", ""
		if ee != nil {
			ename, evalue = ee.EName, ee.EValue
		}
		if out.stdout.String() != st.stdout || result != st.result || ename != st.ename ||
			!strings.Contains(evalue, st.evalue) || (st.stderr != "" && out.stderr.String() != st.stderr) {
			t.Fatalf("%s: stdout %q stderr %q result %q error %+v", st.name, out.stdout.String(), out.stderr.String(), result, ee)
		}
	}
}

// stopsAtTimeout runs an endless loop with a 2 s timeout: it must end
// within a few seconds as a timeout that keeps the context.
func stopsAtTimeout(t *testing.T, it execd.Interpreter, loop string) {
	t.Helper()
	ctx, cancel := context.WithTimeoutCause(context.Background(), 2*time.Second, execd.ErrTimeout)
	defer cancel()
	start := time.Now()
	_, err := it.Run(ctx, loop, &output{})
	if !errors.Is(err, execd.ErrTimeout) || errors.Is(err, execd.ErrContextLost) {
		t.Fatalf("endless loop %q: %v", loop, err)
	}
	if d := time.Since(start); d > 6*time.Second {
		t.Fatalf("the loop %q stopped after %s", loop, d)
	}
}

func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip(tool, "is not installed: no context of its language here")
		}
	}
}

func TestJavaContext(t *testing.T) {
	needTools(t, "java", "jshell")
	b := newBackend(t)
	it, err := b.NewInterpreter(context.Background(), "java", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = it.Close() })
	runSteps(t, it, []cellStep{
		{name: "declare", code: "int x = 41;"},
		{name: "expression value", code: "x + 1", result: "42"},
		{name: "method", code: "int sq(int n) {\n    return n * n;\n}"},
		{name: "method from an earlier cell", code: "System.out.println(\"sq \" + sq(3));\nSystem.err.print(\"e\");\nsq(4)", stdout: "sq 9\n", stderr: "e", result: "16"},
		{name: "default imports", code: "List<Integer> l = new ArrayList<>(List.of(3, 1, 2));\nCollections.sort(l);\nl", result: "[1, 2, 3]"},
		{name: "class", code: "class P { int a = 7; }"},
		{name: "class from an earlier cell", code: "new P().a", result: "7"},
		{name: "compile error at the cell's line", code: "int y = 1;\n\nString s = nope;", ename: "CompilationError", evalue: "<cell-8>:3"},
		{name: "exception", code: "Object o = null;\no.toString()", ename: "java.lang.NullPointerException"},
		{name: "thrown", code: "throw new IllegalStateException(\"bad\");", ename: "java.lang.IllegalStateException", evalue: "bad"},
		{name: "state after errors", code: "x", result: "41"},
	})

	stopsAtTimeout(t, it, "while (true) {}")
	runSteps(t, it, []cellStep{{name: "state after the interrupt", code: "x * 2", result: "82"}})
}

func TestGoContext(t *testing.T) {
	needTools(t, "go")
	b := newBackend(t)
	it, err := b.NewInterpreter(context.Background(), "go", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = it.Close() })
	runSteps(t, it, []cellStep{
		{name: "declarations and statements", code: "import \"fmt\"\n\nfunc sq(n int) int { return n * n }\nfmt.Println(sq(3))", stdout: "9\n"},
		{name: "func and import from an earlier cell", code: "fmt.Println(sq(4))", stdout: "16\n"},
		{name: "declarations only", code: "import \"strings\"\ntype T struct{ S string }\nfunc (t T) Up() string { return strings.ToUpper(t.S) }"},
		{name: "method", code: "fmt.Println(T{\"go\"}.Up())", stdout: "GO\n"},
		{name: "replaced declaration", code: "func sq(n int) int { return n + 1 }\nfmt.Println(sq(4))", stdout: "5\n"},
		{name: "compile error at the cell's line", code: "x := 1\n\nfmt.Println(x, y)", ename: "CompilationError", evalue: "<cell-6>:3:"},
		{name: "a failed declaration is not remembered", code: "func broken() int { return \"s\" }", ename: "CompilationError"},
		{name: "still compiles", code: "fmt.Println(\"ok\")", stdout: "ok\n"},
		{name: "panic", code: "var s []int\n_ = s[5]", ename: "panic", evalue: "index out of range"},
		{name: "exit status", code: "import \"os\"\nos.Exit(3)", ename: "ExitError", evalue: "exit status 3"},
		{name: "own main", code: "func main() { fmt.Println(\"main\") }", stdout: "main\n"},
		{name: "after errors", code: "fmt.Println(sq(1))", stdout: "2\n"},
	})

	stopsAtTimeout(t, it, "for {\n}")
	runSteps(t, it, []cellStep{{name: "after the timeout", code: "fmt.Println(sq(2))", stdout: "3\n"}})
}

func TestLanguagesJavaGo(t *testing.T) {
	b := newBackend(t, func(o *Options) { o.Java, o.Go = "/nonexistent/java", "/nonexistent/go" })
	if langs := b.Languages(); slices.Contains(langs, "java") || slices.Contains(langs, "go") {
		t.Fatalf("languages without a JDK and go: %v", langs)
	}
	for _, l := range []string{"java", "go"} {
		if _, err := b.NewInterpreter(context.Background(), l, ""); !errors.Is(err, execd.ErrUnknownLanguage) {
			t.Fatalf("%s without its tools: %v", l, err)
		}
	}
}
