// Package ociarchive turns a root filesystem tarball (as mmdebstrap writes
// it) into a single-layer OCI image archive (oci-layout, index.json, blobs)
// that containerd's Import names from the index annotations. The output is
// reproducible: the same rootfs and options give the same bytes, and so the
// same digests.
package ociarchive

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"strings"
	"time"
)

// Media types and annotation keys of the OCI image spec and containerd.
const (
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayerGz  = "application/vnd.oci.image.layer.v1.tar+gzip"

	// AnnotationImageName is the full image name containerd's Import uses.
	AnnotationImageName = "io.containerd.image.name"
	// AnnotationRefName is the OCI reference (the tag) of a manifest.
	AnnotationRefName = "org.opencontainers.image.ref.name"
)

// DefaultPath is the PATH of Debian's root user, the image's default Env.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ErrInvalidOptions is wrapped by [Pack] when its options are unusable.
var ErrInvalidOptions = errors.New("ociarchive: invalid options")

// Options describe the image to pack. Name and Created are required.
type Options struct {
	// Name is the full image name, e.g. "localhost/hybox/python:3-bookworm".
	Name string
	// Created is the image's creation time; every file's mtime is clamped
	// to it, which makes the archive reproducible.
	Created time.Time
	// Architecture and OS of the image; empty means "amd64" and "linux".
	Architecture string
	OS           string
	// Env, Cmd and WorkingDir of the image config; empty Env means
	// [DefaultPath], empty WorkingDir means "/".
	Env        []string
	Cmd        []string
	WorkingDir string
	// CreatedBy is recorded in the config's history.
	CreatedBy string
	// TempDir holds the compressed layer while the archive is written;
	// empty means os.TempDir().
	TempDir string
}

// Result holds the digests ("sha256:...") and sizes of what [Pack] wrote.
type Result struct {
	Name           string `json:"name"`
	ManifestDigest string `json:"manifestDigest"`
	ConfigDigest   string `json:"configDigest"`
	LayerDigest    string `json:"layerDigest"`
	DiffID         string `json:"diffID"`
	LayerSize      int64  `json:"layerSize"`
	RootfsSize     int64  `json:"rootfsSize"`
	ArchiveSize    int64  `json:"archiveSize"`
}

// Validate reports whether the options can make an image.
//
// # Errors
//
// Wraps [ErrInvalidOptions] when Name is empty or has no tag, or Created is
// zero.
func (o Options) Validate() error {
	if o.Name == "" {
		return fmt.Errorf("%w: empty name", ErrInvalidOptions)
	}
	if i := strings.LastIndex(o.Name, ":"); i < 0 || strings.Contains(o.Name[i:], "/") {
		return fmt.Errorf("%w: name %q has no tag", ErrInvalidOptions, o.Name)
	}
	if o.Created.IsZero() {
		return fmt.Errorf("%w: zero creation time", ErrInvalidOptions)
	}
	return nil
}

// Pack reads a rootfs tarball from rootfs and writes an OCI image archive
// with one gzip layer to out. Entries are normalized: names lose their "./"
// prefix, mtimes are clamped to Created, access and change times dropped,
// and device nodes under /dev are left out (the runtime mounts /dev).
//
// # Errors
//
// Wraps [ErrInvalidOptions]; returns errors of reading the rootfs (a
// malformed tar), of the temporary file and of out; ctx.Err() when ctx is
// cancelled between entries.
func Pack(ctx context.Context, out io.Writer, rootfs io.Reader, o Options) (Result, error) {
	if err := o.Validate(); err != nil {
		return Result{}, err
	}
	if o.Architecture == "" {
		o.Architecture = "amd64"
	}
	if o.OS == "" {
		o.OS = "linux"
	}
	if len(o.Env) == 0 {
		o.Env = []string{DefaultPath}
	}
	if o.WorkingDir == "" {
		o.WorkingDir = "/"
	}
	created := o.Created.UTC().Truncate(time.Second)

	tmp, err := os.CreateTemp(o.TempDir, "ociarchive-layer-*")
	if err != nil {
		return Result{}, err
	}
	defer func() {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
	}()
	layer := newDigester(tmp)
	gz, err := gzip.NewWriterLevel(layer, gzip.DefaultCompression)
	if err != nil {
		return Result{}, err
	}
	diff := newDigester(gz)
	if err := normalize(ctx, diff, rootfs, created); err != nil {
		return Result{}, err
	}
	if err := gz.Close(); err != nil {
		return Result{}, err
	}
	res := Result{
		Name:        o.Name,
		LayerDigest: layer.digest(),
		LayerSize:   layer.n,
		DiffID:      diff.digest(),
		RootfsSize:  diff.n,
	}

	cfg, err := json.Marshal(imageConfig{
		Created:      created.Format(time.RFC3339),
		Architecture: o.Architecture,
		OS:           o.OS,
		Config:       runConfig{Env: o.Env, Cmd: o.Cmd, WorkingDir: o.WorkingDir},
		RootFS:       rootFS{Type: "layers", DiffIDs: []string{res.DiffID}},
		History:      []history{{Created: created.Format(time.RFC3339), CreatedBy: o.CreatedBy}},
	})
	if err != nil {
		return Result{}, err
	}
	res.ConfigDigest = digestOf(cfg)
	man, err := json.Marshal(manifest{
		SchemaVersion: 2,
		MediaType:     MediaTypeManifest,
		Config:        descriptor{MediaType: MediaTypeConfig, Digest: res.ConfigDigest, Size: int64(len(cfg))},
		Layers:        []descriptor{{MediaType: MediaTypeLayerGz, Digest: res.LayerDigest, Size: res.LayerSize}},
	})
	if err != nil {
		return Result{}, err
	}
	res.ManifestDigest = digestOf(man)
	tag := o.Name[strings.LastIndex(o.Name, ":")+1:]
	idx, err := json.Marshal(index{
		SchemaVersion: 2,
		MediaType:     MediaTypeIndex,
		Manifests: []descriptor{{
			MediaType: MediaTypeManifest,
			Digest:    res.ManifestDigest,
			Size:      int64(len(man)),
			Platform:  &platform{Architecture: o.Architecture, OS: o.OS},
			Annotations: map[string]string{
				AnnotationImageName: o.Name,
				AnnotationRefName:   tag,
			},
		}},
	})
	if err != nil {
		return Result{}, err
	}

	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return Result{}, err
	}
	cw := &countWriter{w: out}
	tw := tar.NewWriter(cw)
	dirs := []string{"blobs/", "blobs/sha256/"}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: created, Format: tar.FormatPAX}); err != nil {
			return Result{}, err
		}
	}
	files := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", idx},
		{blobPath(res.ConfigDigest), cfg},
		{blobPath(res.ManifestDigest), man},
	}
	for _, f := range files {
		if err := writeFile(tw, f.name, int64(len(f.data)), created, strings.NewReader(string(f.data))); err != nil {
			return Result{}, err
		}
	}
	if err := writeFile(tw, blobPath(res.LayerDigest), res.LayerSize, created, tmp); err != nil {
		return Result{}, err
	}
	if err := tw.Close(); err != nil {
		return Result{}, err
	}
	res.ArchiveSize = cw.n
	return res, nil
}

// normalize copies the rootfs tar to w with reproducible headers.
func normalize(ctx context.Context, w io.Writer, rootfs io.Reader, created time.Time) error {
	tr := tar.NewReader(rootfs)
	tw := tar.NewWriter(w)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read rootfs: %w", err)
		}
		name := cleanName(h.Name)
		if name == "" {
			continue // the root directory itself
		}
		if strings.HasPrefix(name, "dev/") && h.Typeflag != tar.TypeDir {
			continue
		}
		if h.Typeflag == tar.TypeDir {
			name += "/"
		}
		nh := &tar.Header{
			Typeflag: h.Typeflag,
			Name:     name,
			Mode:     h.Mode,
			Uid:      h.Uid,
			Gid:      h.Gid,
			Uname:    h.Uname,
			Gname:    h.Gname,
			Size:     h.Size,
			ModTime:  h.ModTime.UTC().Truncate(time.Second),
			Devmajor: h.Devmajor,
			Devminor: h.Devminor,
			Format:   tar.FormatPAX,
		}
		if nh.ModTime.After(created) {
			nh.ModTime = created
		}
		switch h.Typeflag {
		case tar.TypeLink:
			nh.Linkname = cleanName(h.Linkname)
		case tar.TypeSymlink:
			nh.Linkname = h.Linkname
		}
		for k, v := range h.PAXRecords {
			if strings.HasPrefix(k, "SCHILY.xattr.") {
				if nh.PAXRecords == nil {
					nh.PAXRecords = map[string]string{}
				}
				nh.PAXRecords[k] = v
			}
		}
		if err := tw.WriteHeader(nh); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, tr); err != nil {
				return fmt.Errorf("copy %s: %w", name, err)
			}
		}
	}
	return tw.Close()
}

func cleanName(n string) string {
	c := path.Clean("/" + n)
	return strings.TrimPrefix(c, "/")
}

func writeFile(tw *tar.Writer, name string, size int64, mtime time.Time, r io.Reader) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o644, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
		return err
	}
	n, err := io.Copy(tw, r)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if n != size {
		return fmt.Errorf("write %s: %d bytes, want %d", name, n, size)
	}
	return nil
}

func blobPath(digest string) string {
	return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:")
}

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// digester hashes and counts what passes through it to w.
type digester struct {
	w io.Writer
	h hash.Hash
	n int64
}

func newDigester(w io.Writer) *digester { return &digester{w: w, h: sha256.New()} }

func (d *digester) Write(p []byte) (int, error) {
	n, err := d.w.Write(p)
	d.h.Write(p[:n])
	d.n += int64(n)
	return n, err
}

func (d *digester) digest() string { return "sha256:" + hex.EncodeToString(d.h.Sum(nil)) }

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// JSON documents of the OCI image spec, with only the fields used here;
// field order is fixed, so the bytes are reproducible.
type (
	descriptor struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Size        int64             `json:"size"`
		Platform    *platform         `json:"platform,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	}
	platform struct {
		Architecture string `json:"architecture"`
		OS           string `json:"os"`
	}
	index struct {
		SchemaVersion int          `json:"schemaVersion"`
		MediaType     string       `json:"mediaType"`
		Manifests     []descriptor `json:"manifests"`
	}
	manifest struct {
		SchemaVersion int          `json:"schemaVersion"`
		MediaType     string       `json:"mediaType"`
		Config        descriptor   `json:"config"`
		Layers        []descriptor `json:"layers"`
	}
	imageConfig struct {
		Created      string    `json:"created"`
		Architecture string    `json:"architecture"`
		OS           string    `json:"os"`
		Config       runConfig `json:"config"`
		RootFS       rootFS    `json:"rootfs"`
		History      []history `json:"history"`
	}
	runConfig struct {
		Env        []string `json:"Env,omitempty"`
		Cmd        []string `json:"Cmd,omitempty"`
		WorkingDir string   `json:"WorkingDir,omitempty"`
	}
	rootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	}
	history struct {
		Created   string `json:"created"`
		CreatedBy string `json:"created_by,omitempty"`
	}
)
