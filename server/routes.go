package server

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// badRequest is a 400 INVALID_REQUEST whose message names what is wrong.
func badRequest(msg string) error { return errdefs.New(api.ErrorCodeINVALIDREQUEST, "%s", msg) }

// abortErr answers with err turned into a status and {code, message} by
// errdefs.HTTP, the one function that does this for every surface.
// Internal errors are logged with the request id; their text never reaches
// the caller.
func (s *Server) abortErr(c *gin.Context, err error) {
	status, body := errdefs.HTTP(err)
	if d := errdefs.RetryAfter(err); d > 0 {
		c.Header("Retry-After", strconv.Itoa(int((d+time.Second-1)/time.Second)))
	}
	if status >= 500 {
		s.log.Error("request failed", "method", c.Request.Method, "path", c.Request.URL.Path,
			"requestId", c.GetString("requestId"), "status", status, "err", err)
	}
	c.AbortWithStatusJSON(status, body)
}

func (s *Server) routes() *gin.Engine {
	gin.SetMode(gin.ReleaseMode)
	g := gin.New()
	g.HandleMethodNotAllowed = true
	g.ContextWithFallback = true
	g.Use(gin.Recovery(), requestID())
	g.NoRoute(func(c *gin.Context) {
		s.abortErr(c, errdefs.New(api.ErrorCodeNOTFOUND, "no route %s %s", c.Request.Method, c.Request.URL.Path))
	})
	g.NoMethod(func(c *gin.Context) {
		s.abortErr(c, errdefs.New(api.ErrorCodeMETHODNOTALLOWED, "method %s is not allowed on %s", c.Request.Method, c.Request.URL.Path))
	})
	for _, prefix := range []string{"", "/v1"} {
		r := g.Group(prefix)
		r.GET("/health", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "healthy"}) })
		r.GET("/openapi.yaml", serveOpenAPI)
		r.GET("/openapi.json", s.serveOpenAPIJSON)
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
		a.POST("/sandboxes/:id/fork", s.forkSandbox)
		a.POST("/sandboxes/:id/renew-expiration", s.renewSandbox)
		a.GET("/sandboxes/:id/endpoints/:port", s.getEndpoint)
		a.GET("/sandboxes/:id/diagnostics/events", s.diagnosticEvents)
		a.POST("/run", s.runOneShot)
		a.GET("/images", s.listImages)
		a.POST("/images/import", s.importImage)
		a.POST("/images/pull", s.pullImage)
		a.DELETE("/images/*name", s.removeImage)
		a.GET("/volumes", s.listVolumes)
		a.POST("/volumes", s.createVolume)
		a.GET("/volumes/:name", s.getVolume)
		a.DELETE("/volumes/:name", s.deleteVolume)
		a.GET("/pools", s.listPools)
		a.POST("/pools", s.createPool)
		a.GET("/pools/:name", s.getPool)
		a.PUT("/pools/:name", s.updatePool)
		a.DELETE("/pools/:name", s.deletePool)
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
		s.abortErr(c, errdefs.New(api.ErrorCodeMISSINGAPIKEY, "the OPEN-SANDBOX-API-KEY header is required"))
		return
	}
	if !constantTimeEqual(key, s.opts.APIKey) {
		s.abortErr(c, errdefs.New(api.ErrorCodeINVALIDAPIKEY, "the API key is not valid"))
		return
	}
	c.Next()
}
