package server

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"
)

// headerExecdToken carries a sandbox's own access token. Endpoints return it
// in their headers, so SDKs send it on every execd request.
const headerExecdToken = "X-EXECD-ACCESS-TOKEN"

// proxy serves /sandboxes/{id}/proxy/{port}/...: the sandbox's execd API
// for port 44772, else the backend's proxy to that port. Unlike upstream it
// is authenticated: the API key, or the sandbox's own token.
func (s *Server) proxy(c *gin.Context) {
	id := c.Param("id")
	r, err := s.store.get(id)
	if err != nil {
		// Do not reveal whether the id exists to unauthenticated callers.
		if !s.opts.Insecure && !constantTimeEqual(c.GetHeader("OPEN-SANDBOX-API-KEY"), s.opts.APIKey) {
			c.AbortWithStatusJSON(http.StatusUnauthorized, gin.H{"code": codeInvalidAPIKey, "message": "an API key or the sandbox's access token is required"})
			return
		}
		s.abortErr(c, err)
		return
	}
	if !s.opts.Insecure {
		key := c.GetHeader("OPEN-SANDBOX-API-KEY")
		tok := c.GetHeader(headerExecdToken)
		if !(key != "" && constantTimeEqual(key, s.opts.APIKey)) && !(tok != "" && constantTimeEqual(tok, r.Token)) {
			code := codeMissingAPIKey
			if key != "" || tok != "" {
				code = codeInvalidAPIKey
			}
			c.AbortWithStatusJSON(http.StatusUnauthorized, gin.H{"code": code, "message": "an API key or the sandbox's access token is required"})
			return
		}
	}
	port, err := strconv.Atoi(c.Param("port"))
	if err != nil || port < 1 || port > 65535 {
		s.abortErr(c, badRequest("port must be an integer from 1 to 65535"))
		return
	}
	sb, ok := s.liveSandbox(id)
	if !ok {
		c.AbortWithStatusJSON(http.StatusConflict, gin.H{"code": codeInvalidState, "message": "sandbox " + id + " is " + r.State + ", not running"})
		return
	}
	var h http.Handler
	if port == execdPort {
		h = sb.Execd()
	} else if h, err = sb.Proxy(port); err != nil {
		s.abortErr(c, err)
		return
	}
	path := c.Param("path")
	if path == "" {
		path = "/"
	}
	req := c.Request.Clone(c.Request.Context())
	req.URL.Path = path
	req.URL.RawPath = ""
	if !strings.HasPrefix(req.URL.Path, "/") {
		req.URL.Path = "/" + req.URL.Path
	}
	req.RequestURI = req.URL.RequestURI()
	h.ServeHTTP(c.Writer, req)
	c.Abort()
}
