package oci

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// maxSunPath is the usable length of a unix socket path on Linux.
const maxSunPath = 107

// dialUnix connects to the unix socket at path. A path longer than the
// kernel allows (deep data directories) is reached through an open handle
// on its directory: /proc/self/fd/N/name.
func dialUnix(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	if len(path) <= maxSunPath {
		return d.DialContext(ctx, "unix", path)
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	short := fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(path))
	return d.DialContext(ctx, "unix", short)
}
