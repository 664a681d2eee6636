package main

import (
	"fmt"
	"strings"

	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/kernels/crc64nvme"
	"github.com/difctl/difctl/kernels/crct10dif"
)

// algorithm adapts one kernel package to a width-free interface for crc
// and bench: CRCs travel as uint64 whatever their width.
type algorithm struct {
	name    string // --alg name: t10dif, crc32c, crc64nvme
	kernel  string // kernel package, as the registry names it
	bits    int    // guard width: 16, 32 or 64
	update  func(crc uint64, p []byte) uint64
	batcher func(n int) func(p []byte, blockLen, stride int) error // Blocks with a dst of n guards
}

// hex formats crc with the width of the algorithm, the way the guard is
// written big-endian on media.
func (a *algorithm) hex(crc uint64) string { return fmt.Sprintf("%0*x", a.bits/4, crc) }

// algorithms lists the kernels, in the order help and bench show them.
var algorithms = []*algorithm{
	{
		name: "t10dif", kernel: "crct10dif", bits: 16,
		update: func(crc uint64, p []byte) uint64 { return uint64(crct10dif.Update(uint16(crc), p)) },
		batcher: func(n int) func([]byte, int, int) error {
			dst := make([]uint16, n)
			return func(p []byte, blockLen, stride int) error {
				err := crct10dif.Blocks(dst, p, blockLen, stride)
				benchSink ^= uint64(dst[0]) ^ uint64(dst[n-1])
				return err
			}
		},
	},
	{
		name: "crc32c", kernel: "crc32c", bits: 32,
		update: func(crc uint64, p []byte) uint64 { return uint64(crc32c.Update(uint32(crc), p)) },
		batcher: func(n int) func([]byte, int, int) error {
			dst := make([]uint32, n)
			return func(p []byte, blockLen, stride int) error {
				err := crc32c.Blocks(dst, p, blockLen, stride)
				benchSink ^= uint64(dst[0]) ^ uint64(dst[n-1])
				return err
			}
		},
	},
	{
		name: "crc64nvme", kernel: "crc64nvme", bits: 64,
		update: func(crc uint64, p []byte) uint64 { return crc64nvme.Update(crc, p) },
		batcher: func(n int) func([]byte, int, int) error {
			dst := make([]uint64, n)
			return func(p []byte, blockLen, stride int) error {
				err := crc64nvme.Blocks(dst, p, blockLen, stride)
				benchSink ^= dst[0] ^ dst[n-1]
				return err
			}
		},
	},
}

// benchSink consumes kernel results so the compiler cannot drop the work.
var benchSink uint64

// lookupAlgorithm finds an algorithm by --alg name or kernel package name.
func lookupAlgorithm(name string) (*algorithm, error) {
	for _, a := range algorithms {
		if name == a.name || name == a.kernel {
			return a, nil
		}
	}
	return nil, fmt.Errorf("unknown algorithm %q (want %s)", name, algorithmNames())
}

func algorithmNames() string {
	names := make([]string, len(algorithms))
	for i, a := range algorithms {
		names[i] = a.name
	}
	return strings.Join(names, ", ")
}
