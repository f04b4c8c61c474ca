package server

import (
	"encoding/json"
	"net/http"
	"sync"

	"github.com/gin-gonic/gin"
	"go.yaml.in/yaml/v3"

	"github.com/hybox-dev/hybox/sdks"
)

// openAPIDocument is the protocol document (sdks/openapi.yaml).
// openapi_test.go keeps it in step with the routes.
var openAPIDocument = sdks.OpenAPI

// OpenAPIDocument returns the OpenAPI 3.1 document (YAML) describing the
// API a Server serves: the lifecycle routes and, tagged "execd" and
// "egress", the APIs of each sandbox behind its endpoints for ports 44772
// and 18080. The caller owns the copy.
func OpenAPIDocument() []byte {
	return append([]byte(nil), openAPIDocument...)
}

// openAPIJSON is the document as JSON, converted once.
var openAPIJSON = sync.OnceValues(func() ([]byte, error) {
	var doc any
	if err := yaml.Unmarshal(openAPIDocument, &doc); err != nil {
		return nil, err
	}
	return json.Marshal(doc)
})

// serveOpenAPI answers GET /openapi.yaml. Like /health it needs no API key:
// the document describes the API, not any sandbox.
func serveOpenAPI(c *gin.Context) {
	c.Data(http.StatusOK, "application/yaml", openAPIDocument)
}

// serveOpenAPIJSON answers GET /openapi.json.
func (s *Server) serveOpenAPIJSON(c *gin.Context) {
	b, err := openAPIJSON()
	if err != nil {
		s.abortErr(c, err)
		return
	}
	c.Data(http.StatusOK, "application/json", b)
}
