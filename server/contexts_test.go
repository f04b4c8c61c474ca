package server

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybox-dev/hybox/runtimes/oci/ocitest"
)

// TestTypeScriptAndBashContexts: TypeScript and Bash code contexts in both
// tiers (wasm; runc as root): state kept between runs, a TypeScript
// exception and syntax error at the TypeScript line, a Bash exit status as
// data, and GET /code/contexts listing them.
func TestTypeScriptAndBashContexts(t *testing.T) {
	tiers := []struct {
		name   string
		create map[string]any
	}{
		{name: "wasm"},
		{name: "runc", create: map[string]any{
			"image":      map[string]string{"uri": ocitest.ImageName},
			"extensions": map[string]string{"hybox.io/runtime": "runc"},
			"entrypoint": []string{"sleep", "infinity"},
		}},
	}
	for _, tier := range tiers {
		t.Run(tier.name, func(t *testing.T) {
			h := newHarness(t, "", harnessOpts{containers: tier.create != nil})
			sb := h.create(tier.create)
			t.Cleanup(func() { h.do("DELETE", "/v1/sandboxes/"+sb.ID, nil) })
			newContext := func(lang string) string {
				st, b := h.execd(sb.ID, "POST", "/code/context", map[string]string{"language": lang})
				require.Equal(t, 200, st, string(b))
				var c struct{ ID, Language string }
				require.NoError(t, json.Unmarshal(b, &c))
				require.Equal(t, lang, c.Language)
				return c.ID
			}
			run := func(id, code string) outcome {
				st, b := h.execd(sb.ID, "POST", "/code", map[string]any{"context": map[string]string{"id": id}, "code": code})
				require.Equal(t, 200, st, string(b))
				return summarise(t, b)
			}

			ts := newContext("typescript")
			o := run(ts, "interface Point {\n  x: number\n  y: number\n}\nconst p: Point = { x: 40, y: 2 }\nenum Color { Red, Green }\nconsole.log('set')")
			require.Nil(t, o.err, "%+v", o.err)
			assert.Equal(t, "set\n", strings.Join(o.stdout, ""))
			o = run(ts, "const sum = (q: Point): number => q.x + q.y\nsum(p) + Color.Green * 0")
			require.Nil(t, o.err, "%+v", o.err)
			require.Len(t, o.results, 1)
			assert.Equal(t, "42", o.results[0]["text"], "state kept between TypeScript runs")

			// The exception is thrown on TypeScript line 7; esbuild drops
			// the type-only lines, so the JavaScript has it on line 2.
			o = run(ts, "type Maybe<T> = T | null\ninterface Box {\n  inner: { v: number } | null\n}\n\nfunction open(b: Box): number {\n  return (b.inner as any).v\n}\nopen({ inner: null })")
			require.NotNil(t, o.err)
			assert.Equal(t, "TypeError", o.err.EName)
			frames := strings.Join(o.err.Traceback, "\n")
			assert.Regexp(t, regexp.MustCompile(`(<repl>|<cell-\d+>):7\b`), frames, "the traceback names TypeScript line 7")
			assert.NotRegexp(t, regexp.MustCompile(`(<repl>|<cell-\d+>):2\b`), frames, "the traceback names a JavaScript line")

			o = run(ts, "const ok: number = 1\n\nlet broken: number = = 2\n")
			require.NotNil(t, o.err)
			assert.Equal(t, "SyntaxError", o.err.EName)
			assert.Contains(t, o.err.EValue, "line 3, column 22")
			assert.Contains(t, strings.Join(o.err.Traceback, "\n"), "<typescript>:3:22")
			o = run(ts, "p.x")
			require.Nil(t, o.err, "%+v", o.err)
			assert.Equal(t, "40", o.results[0]["text"], "state kept after errors")

			sh := newContext("bash")
			o = run(sh, "X=41\ngreet() { echo \"hi $1\"; }\ncd /tmp")
			require.Nil(t, o.err, "%+v", o.err)
			o = run(sh, "echo $((X + 1)) $(pwd)\ngreet there")
			require.Nil(t, o.err, "%+v", o.err)
			assert.Equal(t, "42 /tmp\nhi there\n", strings.Join(o.stdout, ""), "variables, functions and cwd kept")
			o = run(sh, "echo out; echo err >&2; (exit 3)")
			require.NotNil(t, o.err)
			assert.Equal(t, "CommandExecError", o.err.EName)
			assert.Equal(t, "3", o.err.EValue)
			assert.Equal(t, "out\n", strings.Join(o.stdout, ""))
			assert.Equal(t, "err\n", strings.Join(o.stderr, ""))
			o = run(sh, "echo $X")
			assert.Equal(t, "41\n", strings.Join(o.stdout, ""), "state kept after a failure")

			// The default contexts of the languages (/code with a language).
			require.Nil(t, h.code(sb.ID, "ts", "let n: number = 6").err)
			assert.Equal(t, "42", h.code(sb.ID, "typescript", "n * 7").results[0]["text"])
			require.Nil(t, h.code(sb.ID, "bash", "Y=7").err)
			assert.Equal(t, "7\n", strings.Join(h.code(sb.ID, "sh", "echo $Y").stdout, ""))

			st, b := h.execd(sb.ID, "GET", "/code/contexts", nil)
			require.Equal(t, 200, st, string(b))
			var all []struct{ ID, Language string }
			require.NoError(t, json.Unmarshal(b, &all))
			langs := map[string]int{}
			for _, c := range all {
				langs[c.Language]++
			}
			assert.Equal(t, map[string]int{"typescript": 2, "bash": 2}, langs, fmt.Sprint(all))
			st, b = h.execd(sb.ID, "GET", "/code/contexts?language=ts", nil)
			require.Equal(t, 200, st, string(b))
			require.NoError(t, json.Unmarshal(b, &all))
			assert.Len(t, all, 2)
		})
	}
}
