package server

import (
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/hybox-dev/hybox/ingress"
)

// headerExecdToken carries a sandbox's own access token. Endpoints return it
// in their headers, so SDKs send it on every execd request.
const headerExecdToken = "X-EXECD-ACCESS-TOKEN"

// proxy serves /sandboxes/{id}/proxy/{port}/...: the sandbox's execd API
// for port 44772, else the backend's proxy to that port. Unlike upstream it
// is authenticated: the API key, the sandbox's own token, or a signed route
// token for that sandbox and port.
func (s *Server) proxy(c *gin.Context) {
	id := c.Param("id")
	port, err := strconv.Atoi(c.Param("port"))
	if err != nil || port < 1 || port > 65535 {
		s.abortErr(c, badRequest("port must be an integer from 1 to 65535"))
		return
	}
	if err := s.authorizeSandbox(c.Request, id, port); err != nil {
		ingress.WriteError(c.Writer, err)
		c.Abort()
		return
	}
	t, err := s.Resolve(c.Request.Context(), id, port)
	if err != nil {
		ingress.WriteError(c.Writer, err)
		c.Abort()
		return
	}
	// The rest of the path, still escaped, after /sandboxes/{id}/proxy/{port}.
	esc := c.Request.URL.EscapedPath()
	marker := "/proxy/" + c.Param("port")
	rest := "/"
	if i := strings.Index(esc, marker); i >= 0 {
		rest = esc[i+len(marker):]
		if rest == "" {
			rest = "/"
		}
	}
	for _, h := range stripHeaders {
		c.Request.Header.Del(h)
	}
	ingress.Proxy(c.Writer, c.Request, t, rest)
	c.Abort()
}
