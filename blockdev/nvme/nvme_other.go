//go:build !linux

package nvme

import (
	"fmt"
	"os"

	"github.com/difctl/difctl/dif"
)

// Off Linux there is no passthrough: every file is refused with
// ErrNotNVMe.

func notNVMe(f *os.File) error {
	return fmt.Errorf("%w: %s: NVMe passthrough needs Linux", ErrNotNVMe, f.Name())
}

// NamespaceID returns ErrNotNVMe off Linux.
func NamespaceID(f *os.File) (uint32, error) { return 0, notNVMe(f) }

// IdentifyNamespace returns ErrNotNVMe off Linux.
func IdentifyNamespace(f *os.File) (Namespace, error) { return Namespace{}, notNVMe(f) }

// Read returns ErrNotNVMe off Linux.
func Read(f *os.File, nsid uint32, lba uint64, n int, data, md []byte) error { return notNVMe(f) }

// Write returns ErrNotNVMe off Linux.
func Write(f *os.File, nsid uint32, lba uint64, n int, data, md []byte, prot Protection) error {
	return notNVMe(f)
}

// ReadIntegrity finds no profile off Linux.
func ReadIntegrity(name string) (Integrity, error) { return Integrity{}, nil }

func blockName(f *os.File) (string, error) { return "", notNVMe(f) }

func maxBlocks(name string, f dif.Format) int { return 1 }

// dropCache does nothing off Linux.
func dropCache(f *os.File, off, n int64) {}
