package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/nbdclient"
)

// The other copies of a protected image: mirror legs (recorded in the
// store by name) and repair sources (--from). Each is an image file or a
// block device, named by its path, or an NBD export, named by its URL
// (nbd://, nbds://, nbd+unix://, nbds+unix://; package blockdev/nbdclient).

// isNBDURL reports whether name is an NBD URL.
func isNBDURL(name string) bool {
	for _, s := range []string{"nbd://", "nbds://", "nbd+unix://", "nbds+unix://"} {
		if strings.HasPrefix(name, s) {
			return true
		}
	}
	return false
}

// openCopy opens the copy named name (a mirror leg as the store records
// it, or a repair source): an image file or a block device, or an NBD
// export (TLS certificates from the URL's tls-certificates directory).
func openCopy(ctx context.Context, name string, readOnly bool) (device.Device, error) {
	if isNBDURL(name) {
		d, err := nbdclient.Open(ctx, name, nbdclient.Options{ReadOnly: readOnly})
		if err != nil {
			return nil, err
		}
		return d, nil
	}
	dev, err := device.OpenFile(name, device.FileOptions{ReadOnly: readOnly})
	if err != nil {
		return nil, err
	}
	return dev, nil
}

// legName returns the name a new mirror leg is recorded under: a file's
// or device's absolute path, so that the leg opens from any directory; an
// NBD URL as it is.
func legName(arg string) (string, error) {
	if isNBDURL(arg) {
		return arg, nil
	}
	abs, err := filepath.Abs(arg)
	if err != nil {
		return "", err
	}
	return abs, nil
}

// createLeg opens the mirror leg name for writing, creating an image file
// of size bytes (sparse) if there is none. An existing file must have
// that size; the volume checks a device's.
func createLeg(ctx context.Context, name string, size int64) (device.Device, error) {
	if isNBDURL(name) {
		return openCopy(ctx, name, false)
	}
	if _, err := ensureFile(name, size); err != nil {
		return nil, err
	}
	return openCopy(ctx, name, false)
}

// ensureFile makes name a sparse file of size bytes if there is nothing
// there, and returns what is there: nil for a file it made, the existing
// file's information otherwise. A directory is refused.
func ensureFile(name string, size int64) (os.FileInfo, error) {
	fi, err := os.Stat(name)
	switch {
	case os.IsNotExist(err):
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, err
		}
		if err := f.Truncate(size); err != nil {
			f.Close()
			os.Remove(name)
			return nil, err
		}
		return nil, f.Close()
	case err != nil:
		return nil, err
	case fi.IsDir():
		return nil, fmt.Errorf("%s is a directory", name)
	}
	return fi, nil
}

// repairSources are the copies given with --from: opened read-only, each
// a blockdev.RepairSource named by its argument.
type repairSources struct {
	srcs   []blockdev.RepairSource
	closes []func() error
}

// openRepairSources opens each --from argument (its size must be the
// volume's, which the volume checks).
func openRepairSources(ctx context.Context, specs []string) (*repairSources, error) {
	rs := &repairSources{}
	for _, spec := range specs {
		dev, err := openCopy(ctx, spec, true)
		if err != nil {
			rs.close()
			return nil, fmt.Errorf("repair source %s: %w", spec, err)
		}
		rs.srcs = append(rs.srcs, repairCopy{dev, spec})
		rs.closes = append(rs.closes, dev.Close)
	}
	return rs, nil
}

func (rs *repairSources) close() {
	for _, c := range rs.closes {
		c()
	}
}

// repairCopy is a device as a repair source: its size is checked against
// the volume's.
type repairCopy struct {
	device.Device
	name string
}

func (c repairCopy) String() string { return c.name }

// absPaths returns the absolute paths of paths (the repair sources of a
// check a server runs, from its own directory).
func absPaths(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		if isNBDURL(p) {
			abs = p
		}
		out = append(out, abs)
	}
	return out, nil
}
