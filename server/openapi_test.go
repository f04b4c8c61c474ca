package server

import (
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/hybox-dev/hybox/policy/egress"
	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// docOp is one operation of the OpenAPI document.
type docOp struct {
	method string // upper case
	path   string // as written in the document, {name} templates
	tag    string
	op     map[string]any
	item   map[string]any // the (resolved) path item
}

func (o docOp) String() string { return o.method + " " + o.path }

// openAPIMethods are the operation keys of an OpenAPI 3.1 path item.
var openAPIMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// loadOpenAPI parses the embedded document.
func loadOpenAPI(t *testing.T) map[string]any {
	t.Helper()
	var doc map[string]any
	require.NoError(t, yaml.Unmarshal(openAPIDocument, &doc), "openapi.yaml is not valid YAML")
	require.NotEmpty(t, doc)
	return doc
}

// resolvePointer follows a local reference ("#/a/b~1c") in doc.
func resolvePointer(doc map[string]any, ref string) (any, error) {
	rest, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil, fmt.Errorf("%q is not a local reference", ref)
	}
	var cur any = doc
	for _, tok := range strings.Split(rest, "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%q: %q is not inside an object", ref, tok)
		}
		if cur, ok = m[tok]; !ok {
			return nil, fmt.Errorf("%q: no %q", ref, tok)
		}
	}
	return cur, nil
}

// deref returns v, or what its $ref points to.
func deref(t *testing.T, doc map[string]any, v any) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	require.True(t, ok, "expected an object, got %T", v)
	if ref, ok := m["$ref"].(string); ok {
		target, err := resolvePointer(doc, ref)
		require.NoError(t, err)
		return deref(t, doc, target)
	}
	return m
}

// operations lists every operation of the document.
func operations(t *testing.T, doc map[string]any) []docOp {
	t.Helper()
	paths, ok := doc["paths"].(map[string]any)
	require.True(t, ok, "the document has no paths object")
	var out []docOp
	for p, raw := range paths {
		item := deref(t, doc, raw)
		for _, m := range openAPIMethods {
			opRaw, ok := item[m]
			if !ok {
				continue
			}
			op, ok := opRaw.(map[string]any)
			require.True(t, ok, "%s %s is not an object", m, p)
			tags, _ := op["tags"].([]any)
			require.Len(t, tags, 1, "%s %s must have exactly one tag", m, p)
			out = append(out, docOp{method: strings.ToUpper(m), path: p, tag: tags[0].(string), op: op, item: item})
		}
	}
	slices.SortFunc(out, func(a, b docOp) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// walk calls fn for every object in v, with its JSON pointer.
func walk(v any, ptr string, fn func(ptr string, m map[string]any)) {
	switch x := v.(type) {
	case map[string]any:
		fn(ptr, x)
		for k, c := range x {
			walk(c, ptr+"/"+strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1"), fn)
		}
	case []any:
		for i, c := range x {
			walk(c, ptr+"/"+strconv.Itoa(i), fn)
		}
	}
}

var templateParam = regexp.MustCompile(`\{([^}]+)\}`)

func TestOpenAPIDocument(t *testing.T) {
	doc := loadOpenAPI(t)
	assert.Regexp(t, `^3\.1\.\d+$`, doc["openapi"], "openapi must be 3.1.x")

	t.Run("keys are strings", func(t *testing.T) {
		// An unquoted status code (200:) decodes as a number key, which
		// JSON-based OpenAPI tools reject.
		var bad []string
		var check func(v any, ptr string)
		check = func(v any, ptr string) {
			switch x := v.(type) {
			case map[any]any:
				bad = append(bad, ptr)
			case map[string]any:
				for k, c := range x {
					check(c, ptr+"/"+k)
				}
			case []any:
				for i, c := range x {
					check(c, ptr+"/"+strconv.Itoa(i))
				}
			}
		}
		check(doc, "#")
		assert.Empty(t, bad, "objects with non-string keys (quote them)")
	})

	t.Run("every $ref resolves", func(t *testing.T) {
		n := 0
		walk(doc, "#", func(ptr string, m map[string]any) {
			ref, ok := m["$ref"]
			if !ok {
				return
			}
			n++
			s, ok := ref.(string)
			if !assert.True(t, ok, "%s: $ref is not a string", ptr) {
				return
			}
			_, err := resolvePointer(doc, s)
			assert.NoError(t, err, "at %s", ptr)
		})
		assert.Greater(t, n, 50, "the walk found too few references to be looking at the document")
	})

	t.Run("operations", func(t *testing.T) {
		declared := map[string]bool{}
		for _, tg := range doc["tags"].([]any) {
			declared[tg.(map[string]any)["name"].(string)] = true
		}
		schemes := deref(t, doc, doc["components"])["securitySchemes"].(map[string]any)
		ids := map[string]string{}
		for _, o := range operations(t, doc) {
			assert.True(t, declared[o.tag], "%s: tag %q is not declared", o, o.tag)
			if id, ok := o.op["operationId"].(string); ok {
				if prev, dup := ids[id]; dup {
					t.Errorf("%s: operationId %q already used by %s", o, id, prev)
				}
				ids[id] = o.String()
			}
			// Every template parameter is declared as a path parameter.
			params := map[string]bool{}
			for _, src := range []map[string]any{o.item, o.op} {
				list, _ := src["parameters"].([]any)
				for _, p := range list {
					pm := deref(t, doc, p)
					if pm["in"] == "path" {
						params[pm["name"].(string)] = true
						assert.Equal(t, true, pm["required"], "%s: path parameter %v must be required", o, pm["name"])
					}
				}
			}
			for _, m := range templateParam.FindAllStringSubmatch(o.path, -1) {
				assert.True(t, params[m[1]], "%s: path parameter {%s} is not declared", o, m[1])
			}
			resp, ok := o.op["responses"].(map[string]any)
			if assert.True(t, ok, "%s has no responses", o) {
				for code := range resp {
					assert.Regexp(t, `^(default|[1-5][0-9][0-9])$`, code, "%s: response key", o)
				}
			}
			if sec, ok := o.op["security"].([]any); ok {
				for _, req := range sec {
					for name := range req.(map[string]any) {
						assert.Contains(t, schemes, name, "%s: unknown security scheme", o)
					}
				}
			}
			// execd and egress operations live behind the sandbox's
			// endpoint, which their path items name; lifecycle ones use the
			// document's servers.
			_, hasServers := o.item["servers"]
			assert.Equal(t, o.tag == "execd" || o.tag == "egress", hasServers, "%s: a path item has servers exactly when its operations are tagged execd or egress", o)
		}
	})
}

// ginPathToOpenAPI turns gin's :name and *name segments into {name}.
func ginPathToOpenAPI(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if strings.HasPrefix(s, ":") || strings.HasPrefix(s, "*") {
			segs[i] = "{" + s[1:] + "}"
		}
	}
	return strings.Join(segs, "/")
}

func TestOpenAPIMatchesLifecycleRoutes(t *testing.T) {
	doc := loadOpenAPI(t)
	// routes only registers handlers; a zero Server is enough to list them.
	engine := (&Server{}).routes()
	byPrefix := map[string][]string{}
	for _, r := range engine.Routes() {
		if r.Method == http.MethodConnect {
			continue // gin's Any includes CONNECT, which OpenAPI cannot describe
		}
		prefix, p := "", r.Path
		if rest, ok := strings.CutPrefix(r.Path, "/v1/"); ok {
			prefix, p = "/v1", "/"+rest
		}
		byPrefix[prefix] = append(byPrefix[prefix], r.Method+" "+ginPathToOpenAPI(p))
	}
	registered := byPrefix[""]
	require.NotEmpty(t, registered)
	assert.ElementsMatch(t, registered, byPrefix["/v1"], "every route is served both at / and under /v1")

	var documented []string
	for _, o := range operations(t, doc) {
		if o.tag != "execd" && o.tag != "egress" {
			documented = append(documented, o.String())
		}
	}
	assert.Empty(t, without(registered, documented), "registered routes missing from openapi.yaml")
	assert.Empty(t, without(documented, registered), "lifecycle operations in openapi.yaml that no route serves")
}

// TestOpenAPIMatchesEgressRoutes checks the egress API (port 18080) against
// the document in both directions.
func TestOpenAPIMatchesEgressRoutes(t *testing.T) {
	doc := loadOpenAPI(t)
	var documented []string
	for _, o := range operations(t, doc) {
		if o.tag == "egress" {
			documented = append(documented, o.String())
		}
	}
	served := egress.Patterns()
	require.NotEmpty(t, served)
	assert.Empty(t, without(served, documented), "egress routes missing from openapi.yaml")
	assert.Empty(t, without(documented, served), "egress operations in openapi.yaml that no route serves")
}

// without returns the elements of a that are not in b.
func without(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// execdDispatchers are the execd ServeMux patterns that serve several
// documented operations by dispatching on the path themselves.
var execdDispatchers = map[string][]string{
	"GET /command/{}/{}": {"GET /command/status/{}", "GET /command/{}/logs"},
	"/pty/":              {"GET /pty/{}", "DELETE /pty/{}", "GET /pty/{}/ws"},
}

var (
	muxMethodPattern = regexp.MustCompile(`^(GET|HEAD|POST|PUT|PATCH|DELETE) (/\S*)$`)
	anyWildcard      = regexp.MustCompile(`\{[^}]*\}`)
)

// shape erases wildcard names: "GET /code/contexts/{id}" → "GET /code/contexts/{}".
func shape(s string) string { return anyWildcard.ReplaceAllString(s, "{}") }

// execdPatterns reads the ServeMux patterns the execd package registers
// from its source: every string literal that is a method pattern, and the
// method-less patterns given to HandleFunc or Handle. ServeMux cannot list
// its patterns, so the source is the only complete record.
func execdPatterns(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "execd", "*.go"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	fset := token.NewFileSet()
	seen := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		af, err := parser.ParseFile(fset, f, src, parser.SkipObjectResolution)
		require.NoError(t, err)
		ast.Inspect(af, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.BasicLit:
				if s, err := strconv.Unquote(x.Value); err == nil && x.Kind == token.STRING && muxMethodPattern.MatchString(s) {
					seen[shape(s)] = true
				}
			case *ast.CallExpr:
				sel, ok := x.Fun.(*ast.SelectorExpr)
				if !ok || (sel.Sel.Name != "HandleFunc" && sel.Sel.Name != "Handle") || len(x.Args) == 0 {
					return true
				}
				if lit, ok := x.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil && strings.HasPrefix(s, "/") {
						seen[shape(s)] = true
					}
				}
			}
			return true
		})
	}
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

func TestOpenAPIMatchesExecdRoutes(t *testing.T) {
	doc := loadOpenAPI(t)
	var documented []docOp
	shapes := map[string]bool{}
	for _, o := range operations(t, doc) {
		if o.tag == "execd" {
			documented = append(documented, o)
			shapes[shape(o.String())] = true
		}
	}
	require.NotEmpty(t, documented)

	t.Run("every registered pattern is documented", func(t *testing.T) {
		patterns := execdPatterns(t)
		require.Contains(t, patterns, "GET /ping", "the source scan found no patterns")
		covered := map[string]bool{}
		for _, p := range patterns {
			ops, dispatcher := execdDispatchers[p]
			if !dispatcher {
				ops = []string{p}
			}
			for _, op := range ops {
				assert.True(t, shapes[op], "execd serves %s (pattern %q) but openapi.yaml does not document it", op, p)
				covered[op] = true
				if m, rest, ok := strings.Cut(op, " "); ok && m == http.MethodGet {
					covered[http.MethodHead+" "+rest] = true // ServeMux GET patterns answer HEAD too
				}
			}
		}
		for s := range shapes {
			assert.True(t, covered[s], "openapi.yaml documents execd %s, which no execd pattern serves", s)
		}
	})

	t.Run("every documented operation is routed", func(t *testing.T) {
		h := newHarness(t, "", harnessOpts{})
		sb := h.create(nil)
		st, b, _ := h.do("GET", "/v1/sandboxes/"+sb.ID+"/endpoints/44772", nil)
		require.Equal(t, http.StatusOK, st, string(b))
		var ep api.Endpoint
		require.NoError(t, json.Unmarshal(b, &ep))
		base := h.ts.URL + strings.TrimPrefix(ep.Endpoint, strings.TrimPrefix(h.ts.URL, "http://"))

		// routed sends an empty request and reports whether a handler took
		// it: execd answers 404 "no route …" for anything unrouted.
		routed := func(method, path string) (bool, string) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel() // also ends streams such as /metrics/watch
			req, err := http.NewRequestWithContext(ctx, method, base+path, nil)
			require.NoError(t, err)
			for k, v := range ep.Headers {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			if resp.StatusCode == http.StatusMethodNotAllowed {
				return false, "405"
			}
			if resp.StatusCode != http.StatusNotFound {
				return true, resp.Status
			}
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			var e struct{ Code, Message string }
			_ = json.Unmarshal(body, &e)
			return !(e.Code == "NOT_FOUND" && strings.HasPrefix(e.Message, "no route ")), string(body)
		}

		ok, _ := routed(http.MethodGet, "/no-such-execd-route")
		require.False(t, ok, "the probe must recognise an unrouted path")
		for _, o := range documented {
			path := anyWildcard.ReplaceAllString(o.path, "probe")
			ok, detail := routed(o.method, path)
			assert.True(t, ok, "%s (sent %s %s) is not routed by execd: %s", o, o.method, path, detail)
		}
	})
}

func TestOpenAPIServedWithoutKey(t *testing.T) {
	h := newHarness(t, "", harnessOpts{})
	for _, p := range []string{"/openapi.yaml", "/v1/openapi.yaml"} {
		t.Run(p, func(t *testing.T) {
			st, b, hdr := h.do("GET", p, nil, "OPEN-SANDBOX-API-KEY", "")
			require.Equal(t, http.StatusOK, st, string(b))
			assert.Equal(t, "application/yaml", hdr.Get("Content-Type"))
			assert.Equal(t, openAPIDocument, b)
		})
	}
	assert.Equal(t, openAPIDocument, OpenAPIDocument())
}

// errorTableRow matches a row of the ErrorCode table: | `CODE` | 400 | meaning |
var errorTableRow = regexp.MustCompile("(?m)^\\s*\\| `([A-Z_]+)` \\| (\\d{3}) \\| (.+) \\|\\s*$")

// errorTable reads the code → status rows of a markdown table.
func errorTable(t *testing.T, text string) map[string]int {
	t.Helper()
	rows := map[string]int{}
	for _, m := range errorTableRow.FindAllStringSubmatch(text, -1) {
		st, _ := strconv.Atoi(m[2])
		_, dup := rows[m[1]]
		assert.False(t, dup, "code %s is listed twice", m[1])
		rows[m[1]] = st
	}
	return rows
}

// TestErrorCodes: the document's ErrorCode enum, its table of statuses,
// the table in docs/errors.md and errdefs (the one mapping) agree.
func TestErrorCodes(t *testing.T) {
	doc := loadOpenAPI(t)
	schema, err := resolvePointer(doc, "#/components/schemas/ErrorCode")
	require.NoError(t, err)
	sm := schema.(map[string]any)
	var enum []string
	for _, v := range sm["enum"].([]any) {
		enum = append(enum, v.(string))
	}
	table := errorTable(t, sm["description"].(string))
	require.NotEmpty(t, table)
	var tableCodes, mapped []string
	for c := range table {
		tableCodes = append(tableCodes, c)
	}
	for _, c := range errdefs.Codes() {
		mapped = append(mapped, string(c))
	}
	assert.ElementsMatch(t, enum, tableCodes, "the ErrorCode enum and its table list the same codes")
	assert.ElementsMatch(t, enum, mapped, "errdefs maps exactly the document's codes")
	for c, st := range table {
		assert.Equal(t, st, errdefs.Status(api.ErrorCode(c)), "status of %s", c)
	}
	md, err := os.ReadFile(filepath.Join("..", "docs", "errors.md"))
	require.NoError(t, err)
	assert.Equal(t, table, errorTable(t, string(md)), "docs/errors.md lists the document's codes and statuses")
}
