package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	bolt "go.etcd.io/bbolt"

	"github.com/hybox-dev/hybox/runtimes"
	"github.com/hybox-dev/hybox/sdks/go/api"
	"github.com/hybox-dev/hybox/sdks/go/errdefs"
)

// Named volumes (pvc volumes of a create): directories under
// data-dir/volumes, recorded in bucketVolumes, shared by every sandbox
// that names them whatever its runtime. A sandbox's claims on them are in
// its record (Record.Claims).

var bucketVolumes = []byte("volumes")

// volumeRecord is a named volume's entry.
type volumeRecord struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"createdAt"`
	// CreatedBy is the sandbox whose create made it ("" = the API).
	CreatedBy string `json:"createdBy,omitempty"`
}

// volumeClaim is a sandbox's use of a named volume.
type volumeClaim struct {
	Name string `json:"name"`
	// Made says this sandbox's create made the volume; with DeleteAfter
	// the volume goes when the sandbox does, if no other uses it.
	Made        bool `json:"made,omitempty"`
	DeleteAfter bool `json:"deleteAfter,omitempty"`

	// mustExist (createIfNotExists false) and index (of the volume in the
	// create) are for checkClaims.
	mustExist bool
	index     int
}

func (s *Server) volumeDir(name string) string { return filepath.Join(s.opts.DataDir, "volumes", name) }

// namedVolume reads the pvc part of a create's volume i.
func (s *Server) namedVolume(i int, v api.Volume) (runtimes.Volume, volumeClaim, error) {
	p := v.Pvc
	if !poolNameRE.MatchString(p.ClaimName) || len(p.ClaimName) > 253 {
		return runtimes.Volume{}, volumeClaim{}, badRequest(fmt.Sprintf("volumes[%d]: pvc.claimName %q: want lower-case letters, digits and '-' (a DNS label)", i, p.ClaimName))
	}
	create := p.CreateIfNotExists == nil || *p.CreateIfNotExists
	claim := volumeClaim{Name: p.ClaimName, DeleteAfter: p.DeleteOnSandboxTermination, mustExist: !create, index: i}
	return runtimes.Volume{Name: v.Name, HostPath: s.volumeDir(p.ClaimName), SubPath: v.SubPath, MountPath: v.MountPath,
		ReadOnly: v.ReadOnly, Managed: true, Claim: p.ClaimName,
		CreateClaim: create, DeleteClaim: p.DeleteOnSandboxTermination, Storage: p.Storage}, claim, nil
}

// checkClaims refuses a named volume that a create may not make
// (createIfNotExists false) and that does not exist, before anything is
// made. A runtime that owns its claims (runtimes.ClaimOwner) checks them
// itself.
func (s *Server) checkClaims(rec *Record) error {
	for _, c := range rec.Claims {
		if !c.mustExist {
			continue
		}
		if _, err := s.store.getVolume(c.Name); err != nil {
			return badRequest(fmt.Sprintf("volumes[%d]: volume %s does not exist and createIfNotExists is false", c.index, c.Name))
		}
	}
	return nil
}

// ensureVolumes makes the named volumes of rec that do not exist yet and
// marks them in use until done runs (the create then has written its
// record, which keeps them in use, or failed); undo removes what it made.
func (s *Server) ensureVolumes(rec *Record) (undo, done func(), err error) {
	var made []string
	s.mu.Lock()
	for _, c := range rec.Claims {
		s.creatingOn[c.Name]++
	}
	s.mu.Unlock()
	done = func() {
		s.mu.Lock()
		for _, c := range rec.Claims {
			if s.creatingOn[c.Name]--; s.creatingOn[c.Name] <= 0 {
				delete(s.creatingOn, c.Name)
			}
		}
		s.mu.Unlock()
	}
	undo = func() {
		for _, n := range made {
			_ = os.RemoveAll(s.volumeDir(n))
			_ = s.store.deleteKey(bucketVolumes, n)
		}
	}
	defer func() {
		if err != nil {
			undo()
			done()
		}
	}()
	for i, c := range rec.Claims {
		if _, err := s.store.getVolume(c.Name); err == nil {
			continue
		}
		if err := os.MkdirAll(s.volumeDir(c.Name), 0o755); err != nil {
			return nil, nil, err
		}
		if err := s.store.putJSON(bucketVolumes, c.Name, volumeRecord{Name: c.Name, CreatedAt: time.Now().UTC(), CreatedBy: rec.ID}); err != nil {
			return nil, nil, err
		}
		made = append(made, c.Name)
		rec.Claims[i].Made = true
	}
	return undo, done, nil
}

// releaseVolumes removes the volumes rec made and asked to remove with
// it, unless another sandbox uses them.
func (s *Server) releaseVolumes(rec *Record) error {
	var errs []error
	for _, c := range rec.Claims {
		if !c.Made || !c.DeleteAfter {
			continue
		}
		users, err := s.volumeUsers(c.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if users = slices.DeleteFunc(users, func(id string) bool { return id == rec.ID }); len(users) > 0 {
			s.log.Info("volume kept: other sandboxes use it", "volume", c.Name, "usedBy", users)
			continue
		}
		errs = append(errs, os.RemoveAll(s.volumeDir(c.Name)), s.store.deleteKey(bucketVolumes, c.Name))
	}
	return errors.Join(errs...)
}

// volumeUsers lists the sandboxes whose records claim volume name.
func (s *Server) volumeUsers(name string) ([]string, error) {
	users, err := s.allVolumeUsers()
	return users[name], err
}

// allVolumeUsers maps every claimed volume to the sandboxes claiming it,
// from one pass over the records.
func (s *Server) allVolumeUsers() (map[string][]string, error) {
	recs, err := s.store.list()
	if err != nil {
		return nil, err
	}
	users := map[string][]string{}
	for _, r := range recs {
		for _, c := range r.Claims {
			users[c.Name] = append(users[c.Name], r.ID)
		}
	}
	return users, nil
}

func (s *store) getVolume(name string) (volumeRecord, error) {
	var v volumeRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketVolumes).Get([]byte(name))
		if b == nil {
			return errdefs.New(api.ErrorCodeNOTFOUND, "volume %q does not exist", name)
		}
		return json.Unmarshal(b, &v)
	})
	return v, err
}

// wireVolume is the API form of v, used by users (sandbox ids).
func (s *Server) wireVolume(v volumeRecord, users []string) api.NamedVolume {
	if users == nil {
		users = []string{}
	}
	var size int64
	_ = filepath.WalkDir(s.volumeDir(v.Name), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				size += fi.Size()
			}
		}
		return nil
	})
	return api.NamedVolume{Name: v.Name, CreatedAt: v.CreatedAt, SizeBytes: size, UsedBy: users}
}

func (s *Server) listVolumes(c *gin.Context) {
	vs, err := listBucket[volumeRecord](s.store, bucketVolumes, "volume")
	if err != nil {
		s.abortErr(c, err)
		return
	}
	users, err := s.allVolumeUsers()
	if err != nil {
		s.abortErr(c, err)
		return
	}
	out := api.NamedVolumeList{Items: []api.NamedVolume{}}
	for _, v := range vs {
		out.Items = append(out.Items, s.wireVolume(v, users[v.Name]))
	}
	slices.SortFunc(out.Items, func(a, b api.NamedVolume) int { return strings.Compare(a.Name, b.Name) })
	c.JSON(http.StatusOK, out)
}

func (s *Server) getVolume(c *gin.Context) {
	v, err := s.store.getVolume(c.Param("name"))
	if err != nil {
		s.abortErr(c, err)
		return
	}
	users, err := s.volumeUsers(v.Name)
	if err != nil {
		s.abortErr(c, err)
		return
	}
	c.JSON(http.StatusOK, s.wireVolume(v, users))
}

func (s *Server) createVolume(c *gin.Context) {
	var req api.CreateVolumeRequest
	if err := decodeBody(c, &req); err != nil {
		s.abortErr(c, err)
		return
	}
	if !poolNameRE.MatchString(req.Name) || len(req.Name) > 253 {
		s.abortErr(c, badRequest(fmt.Sprintf("volume name %q: want lower-case letters, digits and '-' (a DNS label)", req.Name)))
		return
	}
	unlock := s.lock("volume " + req.Name)
	defer unlock()
	if _, err := s.store.getVolume(req.Name); err == nil {
		s.abortErr(c, errdefs.New(api.ErrorCodeCONFLICT, "volume %q exists", req.Name))
		return
	}
	v := volumeRecord{Name: req.Name, CreatedAt: time.Now().UTC()}
	if err := os.MkdirAll(s.volumeDir(v.Name), 0o755); err != nil {
		s.abortErr(c, err)
		return
	}
	if err := s.store.putJSON(bucketVolumes, v.Name, v); err != nil {
		_ = os.RemoveAll(s.volumeDir(v.Name))
		s.abortErr(c, err)
		return
	}
	c.JSON(http.StatusCreated, s.wireVolume(v, nil))
}

func (s *Server) deleteVolume(c *gin.Context) {
	name := c.Param("name")
	unlock := s.lock("volume " + name)
	defer unlock()
	if _, err := s.store.getVolume(name); err != nil {
		s.abortErr(c, err)
		return
	}
	users, err := s.volumeUsers(name)
	if err != nil {
		s.abortErr(c, err)
		return
	}
	s.mu.Lock()
	creating := s.creatingOn[name] > 0
	s.mu.Unlock()
	if creating {
		s.abortErr(c, errdefs.New(api.ErrorCodeCONFLICT, "volume %s is being mounted by a sandbox being created", name))
		return
	}
	if len(users) > 0 {
		s.abortErr(c, errdefs.New(api.ErrorCodeCONFLICT, "volume %s is used by sandbox %s; delete %s first", name, strings.Join(users, ", "),
			map[bool]string{true: "them", false: "it"}[len(users) > 1]))
		return
	}
	if err := os.RemoveAll(s.volumeDir(name)); err != nil {
		s.abortErr(c, err)
		return
	}
	if err := s.store.deleteKey(bucketVolumes, name); err != nil {
		s.abortErr(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}
