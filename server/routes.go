package server

import (
	"errors"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/hybox-dev/hybox/runtimes"
)

// Wire error codes of the lifecycle API.
const (
	codeMissingAPIKey   = "MISSING_API_KEY"
	codeInvalidAPIKey   = "INVALID_API_KEY"
	codeInvalidRequest  = "INVALID_REQUEST"
	codeNotFound        = "SANDBOX_NOT_FOUND"
	codeRouteNotFound   = "NOT_FOUND"
	codeMethodNotAllow  = "METHOD_NOT_ALLOWED"
	codeNotSupported    = "NOT_SUPPORTED"
	codeUnavailable     = "UNAVAILABLE"
	codeInvalidState    = "INVALID_STATE"
	codeInternal        = "INTERNAL_ERROR"
	codePayloadTooLarge = "PAYLOAD_TOO_LARGE"
)

// apiError carries a status and wire code to the edge.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(msg string) error { return &apiError{http.StatusBadRequest, codeInvalidRequest, msg} }

var errInvalidState = errors.New("invalid state")

// abortErr writes err as {"code","message"}. This is the one place where
// lifecycle errors become HTTP statuses; internal errors are logged and
// answered without their text.
func (s *Server) abortErr(c *gin.Context, err error) {
	var ae *apiError
	status, code, msg := http.StatusInternalServerError, codeInternal, "internal error"
	switch {
	case errors.As(err, &ae):
		status, code, msg = ae.status, ae.code, ae.msg
	case errors.Is(err, runtimes.ErrNotFound):
		status, code, msg = http.StatusNotFound, codeNotFound, err.Error()
	case errors.Is(err, runtimes.ErrInvalid):
		status, code, msg = http.StatusBadRequest, codeInvalidRequest, err.Error()
	case errors.Is(err, runtimes.ErrNotSupported):
		status, code, msg = http.StatusBadRequest, codeNotSupported, err.Error()
	case errors.Is(err, errInvalidState):
		status, code, msg = http.StatusConflict, codeInvalidState, err.Error()
	case errors.Is(err, runtimes.ErrUnavailable):
		status, code, msg = http.StatusServiceUnavailable, codeUnavailable, err.Error()
	default:
		s.log.Error("request failed", "method", c.Request.Method, "path", c.Request.URL.Path, "requestId", c.GetString("requestId"), "err", err)
	}
	c.AbortWithStatusJSON(status, gin.H{"code": code, "message": msg})
}

func (s *Server) routes() *gin.Engine {
	gin.SetMode(gin.ReleaseMode)
	g := gin.New()
	g.HandleMethodNotAllowed = true
	g.ContextWithFallback = true
	g.Use(gin.Recovery(), requestID())
	g.NoRoute(func(c *gin.Context) {
		c.JSON(http.StatusNotFound, gin.H{"code": codeRouteNotFound, "message": "no route " + c.Request.Method + " " + c.Request.URL.Path})
	})
	g.NoMethod(func(c *gin.Context) {
		c.JSON(http.StatusMethodNotAllowed, gin.H{"code": codeMethodNotAllow, "message": "method " + c.Request.Method + " is not allowed on " + c.Request.URL.Path})
	})
	for _, prefix := range []string{"", "/v1"} {
		r := g.Group(prefix)
		r.GET("/health", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "healthy"}) })
		r.GET("/openapi.yaml", serveOpenAPI)
		// The proxy route authenticates itself (API key or the sandbox's token).
		r.Any("/sandboxes/:id/proxy/:port", s.proxy)
		r.Any("/sandboxes/:id/proxy/:port/*path", s.proxy)

		a := r.Group("", s.auth)
		a.POST("/sandboxes", s.createSandbox)
		a.GET("/sandboxes", s.listSandboxes)
		a.GET("/sandboxes/:id", s.getSandbox)
		a.DELETE("/sandboxes/:id", s.deleteSandbox)
		a.PATCH("/sandboxes/:id/metadata", s.patchMetadata)
		a.POST("/sandboxes/:id/pause", s.pauseSandbox)
		a.POST("/sandboxes/:id/resume", s.resumeSandbox)
		a.POST("/sandboxes/:id/renew-expiration", s.renewSandbox)
		a.GET("/sandboxes/:id/endpoints/:port", s.getEndpoint)
		a.POST("/run", s.runOneShot)
		a.GET("/images", s.listImages)
		a.POST("/images/import", s.importImage)
		a.POST("/images/pull", s.pullImage)
		a.DELETE("/images/*name", s.removeImage)
		// SDK telemetry after each create: accepted and dropped.
		a.POST("/metrics/events", func(c *gin.Context) { c.Status(http.StatusNoContent) })
	}
	return g
}

// requestID reads or generates X-Request-ID and echoes it on every response.
func requestID() gin.HandlerFunc {
	return func(c *gin.Context) {
		id := c.GetHeader("X-Request-ID")
		if id == "" || len(id) > 128 || strings.ContainsAny(id, "\r\n") {
			id = newID()
		}
		c.Set("requestId", id)
		c.Header("X-Request-ID", id)
		c.Next()
	}
}

// auth checks OPEN-SANDBOX-API-KEY in constant time.
func (s *Server) auth(c *gin.Context) {
	if s.opts.Insecure {
		c.Next()
		return
	}
	key := c.GetHeader("OPEN-SANDBOX-API-KEY")
	if key == "" {
		c.AbortWithStatusJSON(http.StatusUnauthorized, gin.H{"code": codeMissingAPIKey, "message": "the OPEN-SANDBOX-API-KEY header is required"})
		return
	}
	if !constantTimeEqual(key, s.opts.APIKey) {
		c.AbortWithStatusJSON(http.StatusUnauthorized, gin.H{"code": codeInvalidAPIKey, "message": "the API key is not valid"})
		return
	}
	c.Next()
}
