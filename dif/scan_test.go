package dif

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/difctl/difctl/kernels"
)

// TestClassifyPackedTuples holds the scans of packed tuples (the separate
// layout with metadata of the tuple's size: kernels/piscan's scans under
// each of its implementations, and the strided scans beside them) to the
// oracle, one changed
// block at a time, at both ends of a chunk, in every lane of the unrolled
// loops (four blocks an iteration) and in their tails (the second chunk's
// last three blocks): every byte of its tuple
// changed, its app tag set to 0xFFFF (escaped, which no other check
// flags), its app and space all ones (unwritten). With the app tag
// unchecked the scans must flag an escape themselves; checked against a
// tag other than 0xFFFF, the app tag comparison does.
func TestClassifyPackedTuples(t *testing.T) {
	forEachScan(t, testClassifyPackedTuples)
}

func testClassifyPackedTuples(t *testing.T) {
	formats := []string{"512+8:dix", "512+8:type3:dix", "512+8:sts=8:dix", "512+16:crc64:dix",
		"512+16:crc64:type2:dix", "512+16:crc32:dix", "512+16:crc32:sts=16:dix", "512+12:dix", "512+24:crc64:dix"}
	rng := rand.New(rand.NewPCG(3, 4))
	n := chunk + 7
	at := []int{0, 1, 2, 3, chunk - 1, chunk, chunk + 5, n - 1}
	if testing.Short() {
		at = []int{chunk - 3, chunk - 1, chunk + 2, n - 1}
	}
	for _, fs := range formats {
		f := MustFormat(fs)
		for _, appMask := range []uint16{0, 0xFFFF} {
			t.Run(fmt.Sprintf("format=%s/appmask=%#x", fs, appMask), func(t *testing.T) {
				p := Params{RefTag: 0xFFFFFF00, AppTag: 0x1234, AppMask: appMask, LBA: 7}
				if f.StorageTagBits() > 0 {
					p.StorageTag = 0x5A
					p.RefTag &= 1<<f.RefTagBits() - 1
				}
				data, md := newRun(rng, f, n)
				if err := f.Generate(data, md, p); err != nil {
					t.Fatal(err)
				}
				sp := specOf(f.Guard())
				type change struct {
					name string
					fn   func(tu []byte)
				}
				var changes []change
				for b := range sp.tupleSize {
					for _, x := range []byte{0x01, 0x80} {
						changes = append(changes, change{fmt.Sprintf("byte%d^%#x", b, x), func(tu []byte) { tu[b] ^= x }})
					}
				}
				changes = append(changes,
					change{"escape", func(tu []byte) { tu[sp.guardBytes], tu[sp.guardBytes+1] = 0xFF, 0xFF }},
					change{"unwritten", func(tu []byte) {
						for k := sp.guardBytes; k < sp.tupleSize; k++ {
							tu[k] = 0xFF
						}
					}})
				for _, i := range at {
					for _, c := range changes {
						_, m := oracleBlock(f, data, md, i)
						tu := oracleTupleAt(f, m)
						saved := slices.Clone(tu)
						c.fn(tu)
						// The oracle of block i alone (every other block is ok).
						bs, ms := f.BlockSize(), f.MetadataSize()
						pi := p
						pi.LBA += int64(i)
						if f.Type() != Type3 {
							pi.RefTag = (p.RefTag + uint64(i)) & (1<<f.RefTagBits() - 1)
						}
						want := make([]State, n)
						w, _ := oracleVerify(f, data[i*bs:(i+1)*bs], md[i*ms:(i+1)*ms], pi, 1)
						want[i] = w[0]
						got := make([]State, n)
						if _, err := f.Classify(&Classification{States: got}, data, md, p); err != nil {
							t.Fatal(err)
						}
						if !slices.Equal(got, want) {
							t.Errorf("block %d, %s: state %v, the oracle's %v", i, c.name, got[i], want[i])
						}
						copy(tu, saved)
					}
				}
			})
		}
	}
}

// forEachScan runs f under every implementation of kernels/piscan the CPU
// can run, as subtests "scan=NAME", and restores the default.
func forEachScan(t *testing.T, f func(t *testing.T)) {
	defer kernels.Reset("piscan")
	ran := 0
	for _, im := range kernels.List() {
		if im.Package != "piscan" || !im.Available {
			continue
		}
		t.Run("scan="+im.Name, func(t *testing.T) {
			if err := kernels.Select("piscan", im.Name); err != nil {
				t.Fatal(err)
			}
			f(t)
		})
		ran++
	}
	if ran == 0 {
		t.Fatal("no implementation of kernels/piscan available")
	}
}
