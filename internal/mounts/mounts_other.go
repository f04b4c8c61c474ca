//go:build !linux

package mounts

import (
	"errors"
	"os"
)

var errNoMounts = errors.New("bind mounts are only made on Linux")

// Bind is not available off Linux.
func Bind(src string, dst *os.File, readOnly bool) error { return errNoMounts }

func Detach(mp string) error { return errNoMounts }

// Supported reports that bind mounts are not made here.
func Supported() (bool, string) { return false, "bind mounts are only made on Linux" }
