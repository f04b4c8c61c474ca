package server

import (
	"errors"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// maxImageBytes caps an uploaded image archive.
const maxImageBytes = 32 << 30

func (s *Server) images(c *gin.Context) (runtimes.ImageStore, bool) {
	if s.opts.Images == nil {
		s.abortErr(c, errdefs.New(api.ErrorCodeNOTSUPPORTED,
			"container sandboxes are not enabled on this server (start hybox serve with --containerd)"))
		return nil, false
	}
	return s.opts.Images, true
}

func (s *Server) listImages(c *gin.Context) {
	st, ok := s.images(c)
	if !ok {
		return
	}
	imgs, err := st.List(c.Request.Context())
	if err != nil {
		s.abortErr(c, err)
		return
	}
	if imgs == nil {
		imgs = []runtimes.Image{}
	}
	c.JSON(http.StatusOK, api.ImageList{Items: imgs})
}

// importImage reads an OCI or docker archive from the request body.
func (s *Server) importImage(c *gin.Context) {
	st, ok := s.images(c)
	if !ok {
		return
	}
	body := http.MaxBytesReader(c.Writer, c.Request.Body, maxImageBytes)
	imgs, err := st.Import(c.Request.Context(), body)
	if err != nil {
		s.abortErr(c, err)
		return
	}
	c.JSON(http.StatusOK, api.ImageList{Items: imgs})
}

func (s *Server) pullImage(c *gin.Context) {
	st, ok := s.images(c)
	if !ok {
		return
	}
	var req api.PullImageRequest
	if err := decodeBody(c, &req); err != nil {
		s.abortErr(c, err)
		return
	}
	if strings.TrimSpace(req.Ref) == "" {
		s.abortErr(c, badRequest("ref is required"))
		return
	}
	var auth *runtimes.RegistryAuth
	if req.Auth.Username != "" || req.Auth.Password != "" {
		auth = &runtimes.RegistryAuth{Username: req.Auth.Username, Password: req.Auth.Password}
	}
	img, err := st.Pull(c.Request.Context(), req.Ref, auth)
	if err != nil {
		s.abortErr(c, err)
		return
	}
	c.JSON(http.StatusOK, img)
}

func (s *Server) removeImage(c *gin.Context) {
	name := strings.TrimPrefix(c.Param("name"), "/")
	if name == "" {
		// DELETE /images (the catch-all route also takes it): that path
		// is served for GET only.
		c.Header("Allow", http.MethodGet)
		s.abortErr(c, errdefs.New(api.ErrorCodeMETHODNOTALLOWED,
			"method DELETE is not allowed on %s; name the image: DELETE /images/{name}", c.Request.URL.Path))
		return
	}
	st, ok := s.images(c)
	if !ok {
		return
	}
	if err := st.Remove(c.Request.Context(), name); err != nil {
		if errors.Is(err, runtimes.ErrNotFound) {
			err = errdefs.Wrap(api.ErrorCodeIMAGENOTFOUND, err)
		}
		s.abortErr(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}
