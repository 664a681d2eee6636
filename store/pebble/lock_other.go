//go:build !unix

package pebble

import (
	"io"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// lockStore takes Pebble's own exclusive lock where fcntl locks are not
// available: read-only opens then exclude each other too.
func lockStore(dir, name string, readOnly bool) (io.Closer, error) {
	return vfs.Default.Lock(name)
}

// restrict leaves the file's mode to the system where fchmod is missing.
func restrict(vfs.File) {}
