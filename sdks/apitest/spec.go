// Package apitest is a test helper that checks real HTTP traffic against
// hybox's OpenAPI document (sdks/openapi.yaml): a Recorder wraps the
// server's handler and keeps every response (method, path, status, content
// type, body), and Spec.Validate checks each one against the document: the
// operation exists, the status is documented, the content type is one the
// document names, and a JSON body (or each event of an execd event stream)
// validates against the response's schema (OpenAPI 3.1 schemas are JSON
// Schema 2020-12). Check puts the two together for a test.
package apitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Sandbox ports whose APIs the document describes relative to the sandbox's
// endpoint, and the tag of their operations.
var portTags = map[int]string{44772: "execd", 18080: "egress"}

// ItemSchemaKey names, in a media type object of a stream
// (text/event-stream), the schema of each of its items: one JSON object
// followed by a blank line. OpenAPI 3.1 has no field for it (3.2 calls it
// itemSchema), so the document uses this extension.
const ItemSchemaKey = "x-item-schema"

// errorSchema is the schema of every error body.
const errorSchema = "#/components/schemas/Error"

const docURL = "https://hybox.invalid/openapi.json"

var methods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// operation is one operation of the document.
type operation struct {
	method   string // upper case
	template string // as written in the document
	segs     []string
	tag      string
	ptr      string // JSON pointer of the operation object
	op       map[string]any
}

func (o *operation) String() string { return o.method + " " + o.template }

// Spec is a parsed OpenAPI document whose schemas are compiled on first
// use. It is safe for concurrent use.
type Spec struct {
	doc map[string]any
	ops []*operation

	mu       sync.Mutex
	compiler *jsonschema.Compiler
	schemas  map[string]*jsonschema.Schema
}

// Load parses an OpenAPI 3.1 document (YAML or JSON).
//
// # Errors
//
// Load fails when the document does not parse or has no paths.
func Load(document []byte) (*Spec, error) {
	var y any
	if err := yaml.Unmarshal(document, &y); err != nil {
		return nil, fmt.Errorf("apitest: parse document: %w", err)
	}
	// Through JSON, so that numbers and maps are what a JSON Schema
	// validator expects.
	j, err := json.Marshal(y)
	if err != nil {
		return nil, fmt.Errorf("apitest: document as JSON: %w", err)
	}
	raw, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		return nil, fmt.Errorf("apitest: document as JSON: %w", err)
	}
	doc, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("apitest: the document is not an object")
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(docURL, doc); err != nil {
		return nil, fmt.Errorf("apitest: %w", err)
	}
	s := &Spec{doc: doc, compiler: c, schemas: map[string]*jsonschema.Schema{}}
	paths, ok := doc["paths"].(map[string]any)
	if !ok || len(paths) == 0 {
		return nil, fmt.Errorf("apitest: the document has no paths")
	}
	for tmpl, raw := range paths {
		itemPtr := "#/paths/" + escape(tmpl)
		item, ptr, err := s.deref(raw, itemPtr)
		if err != nil {
			return nil, err
		}
		for _, m := range methods {
			op, ok := item[m].(map[string]any)
			if !ok {
				continue
			}
			tag := ""
			if tags, _ := op["tags"].([]any); len(tags) > 0 {
				tag, _ = tags[0].(string)
			}
			s.ops = append(s.ops, &operation{method: strings.ToUpper(m), template: tmpl,
				segs: strings.Split(strings.Trim(tmpl, "/"), "/"), tag: tag, ptr: ptr + "/" + m, op: op})
		}
	}
	slices.SortFunc(s.ops, func(a, b *operation) int { return strings.Compare(a.String(), b.String()) })
	return s, nil
}

// escape escapes one JSON pointer token.
func escape(tok string) string {
	return strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1")
}

// resolve follows a local JSON pointer ("#/a/b").
func (s *Spec) resolve(ref string) (any, error) {
	rest, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil, fmt.Errorf("apitest: %q is not a local reference", ref)
	}
	var cur any = s.doc
	for _, tok := range strings.Split(rest, "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("apitest: %q: %q is not inside an object", ref, tok)
		}
		if cur, ok = m[tok]; !ok {
			return nil, fmt.Errorf("apitest: %q: no %q", ref, tok)
		}
	}
	return cur, nil
}

// deref returns the object v (found at ptr), or the one its $ref names,
// with that object's pointer.
func (s *Spec) deref(v any, ptr string) (map[string]any, string, error) {
	for range 16 {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, "", fmt.Errorf("apitest: %s is not an object", ptr)
		}
		ref, ok := m["$ref"].(string)
		if !ok {
			return m, ptr, nil
		}
		target, err := s.resolve(ref)
		if err != nil {
			return nil, "", err
		}
		v, ptr = target, ref
	}
	return nil, "", fmt.Errorf("apitest: %s: too many references", ptr)
}

// schema compiles (once) the schema at a JSON pointer of the document.
func (s *Spec) schema(ptr string) (*jsonschema.Schema, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sch, ok := s.schemas[ptr]; ok {
		return sch, nil
	}
	sch, err := s.compiler.Compile(docURL + ptr)
	if err != nil {
		return nil, fmt.Errorf("apitest: compile schema %s: %w", ptr, err)
	}
	s.schemas[ptr] = sch
	return sch, nil
}

// Operations lists the document's operations as "METHOD /template".
func (s *Spec) Operations() []string {
	out := make([]string, len(s.ops))
	for i, o := range s.ops {
		out[i] = o.String()
	}
	return out
}

// match finds the operation of the given tag set ("" = any tag outside
// portTags) for method and an escaped path. pathKnown reports whether some
// operation of that set has the path, with any method.
func (s *Spec) match(tag, method, path string) (op *operation, pathKnown bool) {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	// First templates of the same length; then, as hybox's catch-all
	// routes do, templates whose last parameter takes the rest of the path
	// ("/images/{name}" for "/images/docker.io/library/python:3.12").
	for _, tail := range []bool{false, true} {
		best := -1
		for _, o := range s.ops {
			if tag == "" && isPortTag(o.tag) || tag != "" && o.tag != tag {
				continue
			}
			lit, ok := matchSegs(o.segs, segs, tail)
			if !ok {
				continue
			}
			pathKnown = true
			if o.method == method && lit > best {
				op, best = o, lit
			}
		}
		if pathKnown {
			return op, true
		}
	}
	return nil, false
}

func (s *Spec) hasTag(tag string) bool {
	return slices.ContainsFunc(s.ops, func(o *operation) bool { return o.tag == tag })
}

func isPortTag(tag string) bool {
	for _, t := range portTags {
		if t == tag {
			return true
		}
	}
	return false
}

// matchSegs matches path segments against template segments and returns
// how many literal segments matched (more is a better match). With tail, a
// last template segment that is a parameter takes the rest of the path.
func matchSegs(tmpl, segs []string, tail bool) (int, bool) {
	if tail && len(segs) > len(tmpl) && len(tmpl) > 0 && isParam(tmpl[len(tmpl)-1]) {
		segs = append(segs[:len(tmpl)-1:len(tmpl)-1], strings.Join(segs[len(tmpl)-1:], "/"))
	}
	if len(tmpl) != len(segs) {
		return 0, false
	}
	lit := 0
	for i, t := range tmpl {
		if isParam(t) {
			if segs[i] == "" {
				return 0, false
			}
			continue
		}
		if t != segs[i] {
			return 0, false
		}
		lit++
	}
	return lit, true
}

func isParam(seg string) bool { return strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") }

// Mismatch is one way a response differs from the document.
type Mismatch struct {
	Operation string // "METHOD /template", or the request when no operation matched
	Status    int
	Pointer   string // JSON pointer into the body ("" for the whole response)
	Message   string
}

func (m Mismatch) String() string {
	loc := ""
	if m.Pointer != "" {
		loc = " at " + m.Pointer
	}
	return fmt.Sprintf("%s → %d%s: %s", m.Operation, m.Status, loc, m.Message)
}

var (
	ingressHost = regexp.MustCompile(`^[0-9a-fA-F-]{36}-([0-9]{1,5})$`)
	proxyPath   = regexp.MustCompile(`^/sandboxes/[^/]+/proxy/([0-9]+)(/.*)?$`)
)

// route is where an exchange belongs in the document.
type route struct {
	tag      string // "" for the lifecycle API
	path     string // path within that API
	fallback string // the lifecycle path of the proxy route, for its refusals
	skip     bool   // an application port the document does not describe
}

// routeOf places a request in the document: the lifecycle API, or (through
// the proxy route or the ingress) the API of a sandbox port.
func routeOf(ex *Exchange) route {
	port := 0
	if v := ex.IngressTo; v != "" {
		if i := strings.LastIndexByte(v, '-'); i > 0 {
			port, _ = strconv.Atoi(v[i+1:])
		}
		return portRoute(port, ex.Path, "")
	}
	if host, _, _ := strings.Cut(ex.Host, "."); strings.Contains(ex.Host, ".") {
		if m := ingressHost.FindStringSubmatch(host); m != nil {
			port, _ = strconv.Atoi(m[1])
			return portRoute(port, ex.Path, "")
		}
	}
	p := ex.Path
	if p == "/v1" || strings.HasPrefix(p, "/v1/") {
		p = strings.TrimPrefix(p, "/v1")
	}
	if m := proxyPath.FindStringSubmatch(p); m != nil {
		port, _ = strconv.Atoi(m[1])
		if _, ok := portTags[port]; ok {
			rest := m[2]
			if rest == "" {
				rest = "/"
			}
			return portRoute(port, rest, p)
		}
	}
	return route{path: p}
}

func portRoute(port int, path, fallback string) route {
	tag, ok := portTags[port]
	if !ok {
		return route{skip: true}
	}
	return route{tag: tag, path: path, fallback: fallback}
}

// Validate checks one recorded exchange against the document and returns
// what differs (nothing when it conforms).
func (s *Spec) Validate(ex *Exchange) []Mismatch {
	rt := routeOf(ex)
	if rt.skip || rt.tag != "" && !s.hasTag(rt.tag) {
		// An application port, or a sandbox API the document does not
		// describe (yet).
		return nil
	}
	op, known := s.match(rt.tag, ex.Method, rt.path)
	name := ex.Method + " " + ex.Path
	if op != nil {
		name = op.String()
		if rt.tag != "" {
			name = rt.tag + " " + name
		}
	}
	bad := func(ptr, format string, args ...any) []Mismatch {
		return []Mismatch{{Operation: name, Status: ex.Status, Pointer: ptr, Message: fmt.Sprintf(format, args...)}}
	}
	var resp map[string]any
	var respPtr string
	if op != nil {
		resp, respPtr = s.response(op, ex.Status, true)
	}
	if resp == nil && rt.fallback != "" {
		// Refusals of the proxy route in front of the sandbox's API.
		if pop, _ := s.match("", ex.Method, rt.fallback); pop != nil {
			resp, respPtr = s.response(pop, ex.Status, false)
		}
	}
	if resp == nil && rt.tag == "" && isSlashRedirect(ex) {
		return nil // documented for every lifecycle route
	}
	if resp == nil {
		switch {
		case op == nil && !known && ex.Status == http.StatusNotFound,
			op == nil && known && ex.Status == http.StatusMethodNotAllowed:
			// Unknown routes and methods answer with an Error.
			return s.validateError(name, ex)
		case op == nil && !known:
			return bad("", "no operation in the document for %s %s", ex.Method, rt.path)
		case op == nil:
			return bad("", "the document has no %s for this path", ex.Method)
		default:
			return bad("", "status %d is not documented", ex.Status)
		}
	}
	isDefault := strings.HasSuffix(respPtr, "/default")
	resp, respPtr, err := s.deref(resp, respPtr)
	if err != nil {
		return bad("", "%v", err)
	}
	content, _ := resp["content"].(map[string]any)
	if len(content) == 0 {
		// A default response without content is "whatever the sandbox
		// answers" (the proxy route).
		if len(ex.Body) > 0 && ex.Method != http.MethodHead && !isDefault {
			return bad("", "the document describes no body, got %d bytes of %q", len(ex.Body), ex.ContentType)
		}
		return nil
	}
	return s.validateBody(name, ex, content, respPtr+"/content")
}

// isSlashRedirect reports whether ex redirects to its own path with a
// trailing slash added or removed.
func isSlashRedirect(ex *Exchange) bool {
	switch ex.Status {
	case http.StatusMovedPermanently, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
	default:
		return false
	}
	loc := ex.Location
	return loc != "" && loc != ex.Path && strings.TrimSuffix(loc, "/") == strings.TrimSuffix(ex.Path, "/")
}

// response finds the response object for status: exact, then default.
func (s *Spec) response(op *operation, status int, withDefault bool) (map[string]any, string) {
	rs, _ := op.op["responses"].(map[string]any)
	code := strconv.Itoa(status)
	if r, ok := rs[code].(map[string]any); ok {
		return r, op.ptr + "/responses/" + code
	}
	if r, ok := rs[code[:1]+"XX"].(map[string]any); ok {
		return r, op.ptr + "/responses/" + code[:1] + "XX"
	}
	if r, ok := rs["default"].(map[string]any); ok && withDefault {
		return r, op.ptr + "/responses/default"
	}
	return nil, ""
}

// validateBody checks the content type and body against a content map.
func (s *Spec) validateBody(name string, ex *Exchange, content map[string]any, contentPtr string) []Mismatch {
	bad := func(ptr, format string, args ...any) []Mismatch {
		return []Mismatch{{Operation: name, Status: ex.Status, Pointer: ptr, Message: fmt.Sprintf(format, args...)}}
	}
	if ex.Method == http.MethodHead || ex.Status == http.StatusSwitchingProtocols {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ex.ContentType)
	if err != nil {
		if len(ex.Body) == 0 {
			// No body where one is described: only optional bodies
			// may be absent, and the document marks none so.
			return bad("", "no body, the document describes %s", keys(content))
		}
		return bad("", "content type %q: %v", ex.ContentType, err)
	}
	key, media := mediaFor(content, mt)
	if media == nil {
		return bad("", "content type %q is not among %s", mt, keys(content))
	}
	mediaPtr := contentPtr + "/" + escape(key)
	if _, ok := media["schema"]; !ok {
		return nil
	}
	switch {
	case mt == "text/event-stream":
		if _, ok := media[ItemSchemaKey]; !ok {
			return bad("", "the document does not name the schema of the stream's items (%s at %s)", ItemSchemaKey, mediaPtr)
		}
		return s.validateStream(name, ex, mediaPtr+"/"+ItemSchemaKey)
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		if ex.Truncated {
			return nil
		}
		sch, err := s.schema(mediaPtr + "/schema")
		if err != nil {
			return bad("", "%v", err)
		}
		return validateJSON(name, ex.Status, "", sch, ex.Body)
	}
	return nil
}

// validateError checks an answer no operation describes (an unknown
// route or method): a JSON Error.
func (s *Spec) validateError(name string, ex *Exchange) []Mismatch {
	if ex.Method == http.MethodHead {
		return nil
	}
	if mt, _, _ := mime.ParseMediaType(ex.ContentType); mt != "application/json" {
		return []Mismatch{{Operation: name, Status: ex.Status,
			Message: fmt.Sprintf("an error answer must be application/json, got %q: %q", ex.ContentType, clip(ex.Body))}}
	}
	sch, err := s.schema(errorSchema)
	if err != nil {
		return []Mismatch{{Operation: name, Status: ex.Status, Message: err.Error()}}
	}
	return validateJSON(name, ex.Status, "", sch, ex.Body)
}

// validateStream checks each item of a stream against the schema at
// itemPtr: one JSON object followed by a blank line.
func (s *Spec) validateStream(name string, ex *Exchange, itemPtr string) []Mismatch {
	sch, err := s.schema(itemPtr)
	if err != nil {
		return []Mismatch{{Operation: name, Status: ex.Status, Message: err.Error()}}
	}
	var out []Mismatch
	body := ex.Body
	for i := 0; len(body) > 0; i++ {
		ev, rest, ok := bytes.Cut(body, []byte("\n\n"))
		if !ok && (ex.Truncated || ex.Interrupted) {
			break // cut short by the recorder's cap or the client
		}
		ptr := "item " + strconv.Itoa(i)
		if !ok {
			out = append(out, Mismatch{Operation: name, Status: ex.Status, Pointer: ptr,
				Message: fmt.Sprintf("the stream ends inside an event (no blank line after %q)", clip(ev))})
			break
		}
		body = rest
		if len(bytes.TrimSpace(ev)) == 0 {
			out = append(out, Mismatch{Operation: name, Status: ex.Status, Pointer: ptr, Message: "an empty event"})
			continue
		}
		out = append(out, validateJSON(name, ex.Status, ptr, sch, ev)...)
	}
	return out
}

var printer = message.NewPrinter(language.English)

// validateJSON validates a JSON document and reports each failing leaf
// with its JSON pointer.
func validateJSON(name string, status int, prefix string, sch *jsonschema.Schema, body []byte) []Mismatch {
	mk := func(ptr, msg string) Mismatch {
		if prefix != "" {
			ptr = prefix + " " + ptr
		}
		return Mismatch{Operation: name, Status: status, Pointer: ptr, Message: msg}
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return []Mismatch{mk("", fmt.Sprintf("body is not JSON (%v): %q", err, clip(body)))}
	}
	err = sch.Validate(v)
	if err == nil {
		return nil
	}
	ve, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return []Mismatch{mk("", err.Error())}
	}
	var out []Mismatch
	var leaves func(e *jsonschema.ValidationError)
	leaves = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			out = append(out, mk(pointer(e.InstanceLocation), e.ErrorKind.LocalizedString(printer)+" in "+clip(body)))
			return
		}
		for _, c := range e.Causes {
			leaves(c)
		}
	}
	leaves(ve)
	return out
}

func pointer(toks []string) string {
	var sb strings.Builder
	for _, t := range toks {
		sb.WriteByte('/')
		sb.WriteString(escape(t))
	}
	if sb.Len() == 0 {
		return "/"
	}
	return sb.String()
}

// mediaFor finds the media type object for mt, allowing "type/*" and "*/*".
func mediaFor(content map[string]any, mt string) (string, map[string]any) {
	typ, _, _ := strings.Cut(mt, "/")
	for _, k := range []string{mt, typ + "/*", "*/*"} {
		for ck, v := range content {
			if cmt, _, err := mime.ParseMediaType(ck); err == nil && cmt == k {
				m, _ := v.(map[string]any)
				if m == nil {
					m = map[string]any{}
				}
				return ck, m
			}
		}
	}
	return "", nil
}

func keys(m map[string]any) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return strings.Join(ks, ", ")
}

// clip shortens a body for a message.
func clip(b []byte) string {
	const n = 300
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
