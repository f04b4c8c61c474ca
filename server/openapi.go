package server

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/hybox-dev/hybox/sdks"
)

// openAPIDocument is the protocol document (sdks/openapi.yaml).
// openapi_test.go keeps it in step with the routes.
var openAPIDocument = sdks.OpenAPI

// OpenAPIDocument returns the OpenAPI 3.1 document (YAML) describing the
// API a Server serves: the lifecycle routes and, tagged "execd", the API of
// each sandbox behind its endpoint for port 44772. The caller owns the copy.
func OpenAPIDocument() []byte {
	return append([]byte(nil), openAPIDocument...)
}

// serveOpenAPI answers GET /openapi.yaml. Like /health it needs no API key:
// the document describes the API, not any sandbox.
func serveOpenAPI(c *gin.Context) {
	c.Data(http.StatusOK, "application/yaml", openAPIDocument)
}
