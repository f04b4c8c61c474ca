package pyguest

import (
	"archive/zip"
	"bytes"
	"io/fs"
	"path"
	"strings"
)

// pycacheFS presents the stdlib zip (sources beside legacy, unchecked-hash
// .pyc files) as a directory tree, for `python3` commands: each module's
// bytecode also appears where the source loader looks for it,
// dir/__pycache__/name.cpython-311.pyc. A command started with the zip on
// sys.path would spend most of its start-up reading the zip's directory in
// Python (zipimport); directories are listed by the host instead. Contexts
// do not need this: the zip's directory is read once, into the image.
type pycacheFS struct{ z *zip.Reader }

func newPycacheFS(zipBytes []byte) (*pycacheFS, error) {
	z, err := zip.NewReader(bytes.NewReader(zipBytes), int64(len(zipBytes)))
	if err != nil {
		return nil, err
	}
	return &pycacheFS{z: z}, nil
}

const pycTag = ".cpython-311.pyc"

func (p *pycacheFS) Open(name string) (fs.File, error) {
	dir, base := path.Split(name)
	if strings.HasSuffix(dir, "__pycache__/") && strings.HasSuffix(base, pycTag) {
		legacy := path.Join(path.Dir(strings.TrimSuffix(dir, "/")), strings.TrimSuffix(base, pycTag)+".pyc")
		return p.z.Open(legacy)
	}
	return p.z.Open(name)
}
