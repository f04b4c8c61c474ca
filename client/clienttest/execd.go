package clienttest

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/hybox-dev/hybox/client"
)

// execd serves the execd API of a sandbox under
// /v1/sandboxes/{id}/proxy/44772/.
func (s *Server) execd(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	_, ok := s.lookup(w, r)
	s.mu.Unlock()
	if !ok {
		return
	}
	if r.Header.Get("OpenSandbox-Ingress-To") != id+"-44772" {
		writeError(w, 400, "BAD_ROUTE", "missing OpenSandbox-Ingress-To header")
		return
	}
	if r.Header.Get(client.ExecdTokenHeader) != s.ExecdToken {
		writeError(w, 401, "UNAUTHORIZED", "missing or invalid X-EXECD-ACCESS-TOKEN")
		return
	}
	p := strings.TrimPrefix(r.URL.Path, "/v1/sandboxes/"+id+"/proxy/44772")
	q := r.URL.Query()
	switch {
	case r.Method == "GET" && p == "/ping":
		writeJSON(w, 200, map[string]string{"status": "ok"})
	case r.Method == "POST" && p == "/command":
		s.command(w, r)
	case r.Method == "DELETE" && p == "/command":
		if q.Get("id") == "" {
			writeError(w, 400, "MISSING_QUERY", "query parameter id is required")
			return
		}
		w.WriteHeader(200)
	case r.Method == "GET" && strings.HasPrefix(p, "/command/status/"):
		cid := strings.TrimPrefix(p, "/command/status/")
		code := 0
		writeJSON(w, 200, client.CommandStatus{ID: cid, Content: "sleep 1", Running: false, ExitCode: &code})
	case r.Method == "GET" && strings.HasPrefix(p, "/command/") && strings.HasSuffix(p, "/logs"):
		const logs = "bg output\nmore\n"
		cur, _ := strconv.Atoi(q.Get("cursor"))
		cur = min(max(cur, 0), len(logs))
		w.Header().Set("EXECD-COMMANDS-TAIL-CURSOR", strconv.Itoa(len(logs)))
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, logs[cur:])
	case r.Method == "POST" && p == "/code/context":
		var c client.CodeContext
		_ = json.NewDecoder(r.Body).Decode(&c)
		c.ID = "ctx-" + c.Language
		writeJSON(w, 200, c)
	case r.Method == "GET" && p == "/code/contexts":
		lang := q.Get("language")
		out := []client.CodeContext{{ID: "ctx-python", Language: "python"}, {ID: "ctx-javascript", Language: "javascript"}}
		if lang != "" {
			out = []client.CodeContext{{ID: "ctx-" + lang, Language: lang}}
		}
		writeJSON(w, 200, out)
	case r.Method == "DELETE" && strings.HasPrefix(p, "/code/contexts/"):
		if strings.TrimPrefix(p, "/code/contexts/") == "missing" {
			writeError(w, 404, "CONTEXT_NOT_FOUND", "context missing not found")
			return
		}
		w.WriteHeader(200)
	case r.Method == "POST" && p == "/code":
		var req client.CodeRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			writeError(w, 400, "INVALID_REQUEST_BODY", err.Error())
			return
		}
		if req.Context.ID == "missing" {
			writeError(w, 404, "CONTEXT_NOT_FOUND", "context missing not found")
			return
		}
		s.runCode(s.newStream(w), req.Code)
	case r.Method == "DELETE" && p == "/code":
		w.WriteHeader(200)
	case r.Method == "GET" && p == "/metrics":
		writeJSON(w, 200, client.Metrics{CPUCount: 1, MemTotalMiB: 512, MemUsedMiB: 12, Timestamp: 1})
	default:
		s.filesAPI(w, r, p)
	}
}

func (s *Server) command(w http.ResponseWriter, r *http.Request) {
	var req client.CommandRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, 400, "INVALID_REQUEST_BODY", err.Error())
		return
	}
	if req.Command == "" {
		writeError(w, 400, "INVALID_REQUEST_BODY", "command is required")
		return
	}
	s.mu.Lock()
	s.nextCmd++
	cid := fmt.Sprintf("cmd-%d", s.nextCmd)
	s.mu.Unlock()
	sw := s.newStream(w)
	sw.send(client.Event{Type: client.EventInit, Text: cid})
	if req.Background {
		sw.send(client.Event{Type: client.EventExecutionComplete})
		return
	}
	fields := strings.Fields(req.Command)
	switch {
	case fields[0] == "echo":
		sw.send(client.Event{Type: client.EventStdout, Text: strings.Join(fields[1:], " ")})
	case fields[0] == "exit" && len(fields) == 2:
		sw.send(client.Event{Type: client.EventStdout, Text: "bye"})
		sw.send(client.Event{Type: client.EventStderr, Text: "oops"})
		sw.send(client.Event{Type: client.EventError, Error: &client.ExecError{EName: client.CommandExecError, EValue: fields[1]}})
		return
	case req.Command == "fail":
		sw.send(client.Event{Type: client.EventError, Error: &client.ExecError{EName: "TimeoutError", EValue: "command timed out"}})
		return
	case req.Command == "hang":
		<-r.Context().Done()
		return
	case req.Command == "env":
		sw.send(client.Event{Type: client.EventStdout, Text: "cwd=" + req.Cwd})
		sw.send(client.Event{Type: client.EventStdout, Text: "timeout=" + strconv.FormatInt(req.Timeout, 10)})
		keys := make([]string, 0, len(req.Envs))
		for k := range req.Envs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			sw.send(client.Event{Type: client.EventStdout, Text: k + "=" + req.Envs[k]})
		}
	default:
		sw.send(client.Event{Type: client.EventStdout, Text: "ran: " + req.Command})
	}
	sw.send(client.Event{Type: client.EventExecutionComplete, ExecutionTime: 1})
}

func (s *Server) filesAPI(w http.ResponseWriter, r *http.Request, p string) {
	q := r.URL.Query()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case r.Method == "GET" && p == "/files/info":
		out := map[string]client.FileInfo{}
		for _, fp := range q["path"] {
			b, ok := s.files[fp]
			if !ok {
				writeError(w, 404, "FILE_NOT_FOUND", "file not found: "+fp)
				return
			}
			out[fp] = fileInfo(fp, b)
		}
		writeJSON(w, 200, out)
	case r.Method == "DELETE" && p == "/files":
		if _, ok := s.files[q.Get("path")]; !ok {
			writeError(w, 404, "FILE_NOT_FOUND", "file not found: "+q.Get("path"))
			return
		}
		delete(s.files, q.Get("path"))
		w.WriteHeader(200)
	case r.Method == "POST" && p == "/files/mv":
		var moves []client.Move
		_ = json.NewDecoder(r.Body).Decode(&moves)
		for _, m := range moves {
			b, ok := s.files[m.Src]
			if !ok {
				writeError(w, 404, "FILE_NOT_FOUND", "file not found: "+m.Src)
				return
			}
			delete(s.files, m.Src)
			s.files[m.Dest] = b
		}
		w.WriteHeader(200)
	case r.Method == "GET" && p == "/files/search":
		out := []client.FileInfo{}
		for _, fp := range s.sortedFiles() {
			if ok, _ := path.Match(q.Get("pattern"), path.Base(fp)); ok && strings.HasPrefix(fp, q.Get("path")) {
				out = append(out, fileInfo(fp, s.files[fp]))
			}
		}
		writeJSON(w, 200, out)
	case r.Method == "POST" && p == "/files/upload":
		s.upload(w, r)
	case r.Method == "GET" && p == "/files/download":
		b, ok := s.files[q.Get("path")]
		if !ok {
			writeError(w, 404, "FILE_NOT_FOUND", "file not found: "+q.Get("path"))
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(b)
	case r.Method == "GET" && p == "/directories/list":
		dir := path.Clean(q.Get("path"))
		out := []client.FileInfo{}
		seen := map[string]bool{}
		for _, fp := range s.sortedFiles() {
			rel, ok := strings.CutPrefix(fp, strings.TrimSuffix(dir, "/")+"/")
			if !ok {
				continue
			}
			if first, _, isDir := strings.Cut(rel, "/"); isDir {
				sub := path.Join(dir, first)
				if !seen[sub] {
					seen[sub] = true
					out = append(out, client.FileInfo{Path: sub, Type: client.FileTypeDirectory, Mode: 755, ModifiedAt: "2025-01-01T00:00:00Z"})
				}
				continue
			}
			out = append(out, fileInfo(fp, s.files[fp]))
		}
		if len(out) == 0 && dir != "/" {
			writeError(w, 404, "FILE_NOT_FOUND", "directory not found: "+dir)
			return
		}
		writeJSON(w, 200, out)
	case r.Method == "POST" && p == "/directories":
		var body map[string]map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			writeError(w, 400, "INVALID_REQUEST_BODY", err.Error())
			return
		}
		for d := range body {
			s.files[path.Join(d, ".keep")] = nil
		}
		w.WriteHeader(200)
	case r.Method == "DELETE" && p == "/directories":
		prefix := strings.TrimSuffix(q.Get("path"), "/") + "/"
		for fp := range s.files {
			if strings.HasPrefix(fp, prefix) {
				delete(s.files, fp)
			}
		}
		w.WriteHeader(200)
	default:
		writeError(w, 404, "NOT_FOUND", "no route "+r.Method+" "+p)
	}
}

func (s *Server) sortedFiles() []string {
	out := make([]string, 0, len(s.files))
	for fp := range s.files {
		out = append(out, fp)
	}
	sort.Strings(out)
	return out
}

func fileInfo(p string, b []byte) client.FileInfo {
	return client.FileInfo{
		Path: p, Type: client.FileTypeFile, Size: int64(len(b)), Mode: 644,
		ModifiedAt: "2025-01-01T00:00:00Z", CreatedAt: "2025-01-01T00:00:00Z", Owner: "root", Group: "root",
	}
}

// upload parses the multipart body: pairs of "metadata" and "file" parts.
// Called with s.mu held.
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	_, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || params["boundary"] == "" {
		writeError(w, 400, "INVALID_REQUEST_BODY", "expected multipart/form-data")
		return
	}
	mr := multipart.NewReader(r.Body, params["boundary"])
	var meta *struct {
		Path string `json:"path"`
		Mode int    `json:"mode"`
	}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			writeError(w, 400, "INVALID_REQUEST_BODY", err.Error())
			return
		}
		switch part.FormName() {
		case "metadata":
			meta = &struct {
				Path string `json:"path"`
				Mode int    `json:"mode"`
			}{}
			if err := json.NewDecoder(part).Decode(meta); err != nil || meta.Path == "" {
				writeError(w, 400, "INVALID_REQUEST_BODY", "bad metadata part")
				return
			}
		case "file":
			if meta == nil {
				writeError(w, 400, "INVALID_REQUEST_BODY", "file part without metadata")
				return
			}
			b, err := io.ReadAll(part)
			if err != nil {
				writeError(w, 400, "INVALID_REQUEST_BODY", err.Error())
				return
			}
			s.files[meta.Path] = b
			meta = nil
		}
	}
	w.WriteHeader(200)
}
