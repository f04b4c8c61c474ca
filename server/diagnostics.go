package server

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/hybox-dev/hybox/sdks/go/api"
)

// diagnosticEvents serves GET /sandboxes/{id}/diagnostics/events?scope=S
// (OpenSandbox's diagnostics API): the sandbox's egress controller's latest
// events as text, inline. Scopes: network, all.
func (s *Server) diagnosticEvents(c *gin.Context) {
	r, ok := s.getRecord(c)
	if !ok {
		return
	}
	scope := c.Query("scope")
	switch scope {
	case "network", "all":
	case "":
		s.abortErr(c, badRequest("scope is required (network or all)"))
		return
	default:
		s.abortErr(c, badRequest(fmt.Sprintf("scope %q is not supported (network or all)", scope)))
		return
	}
	resp := api.DiagnosticContentResponse{SandboxID: r.ID, Kind: api.DiagnosticContentResponseKindEvents, Scope: scope,
		Delivery: api.DiagnosticContentResponseDeliveryInline, ContentType: "text/plain; charset=utf-8"}
	if e, ok := s.egressOf(r.ID); ok {
		lines, dropped := e.Events()
		if len(lines) > 0 {
			resp.Content = strings.Join(lines, "\n") + "\n"
		}
		resp.Truncated = dropped > 0
	} else {
		resp.Warnings = []string{fmt.Sprintf("sandbox %s is %s: it has no live egress controller, so no network events", r.ID, r.State)}
	}
	resp.ContentLength = len(resp.Content)
	c.JSON(http.StatusOK, resp)
}
