//go:build isal

package compare

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/difctl/difctl/kernels/_compare/internal/floor"
)

// BenchmarkCallFloor measures, side by side in interleaved rounds, what a
// Go call of an assembly function costs in the loop shape the anchor's
// single-call rows use (`s ^= Checksum(p)`; Update and Checksum are
// inlined into one call of the assembly entry updateEntry), against the
// same loop over difctl's Checksum and ISA-L's C loop over its own
// kernels (the tier its dispatcher picks, or -anchor.tier). The first
// row is the floor a Go caller pays whatever the kernel does: the
// arguments and result through the stack (ABI0), and after the call the
// compiler's XORPS X15 and reload of g. The second is the C loop's own
// floor: a function that does nothing, called through a pointer in the
// loop that times ISA-L. Thread CPU time, median of the rounds, ns per
// call:
//
//	go test -tags isal -run '^$' -bench CallFloor -benchtime 9x
func BenchmarkCallFloor(b *testing.B) {
	if anchorCRC32C.isalChecksum == nil {
		b.Skip("needs ISA-L 2.32.1: build tag isal (see README.md)")
	}
	anchorSetClock(false)
	if *anchorTierFlag != "" {
		restore, err := anchorSelectTier(*anchorTierFlag)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(restore)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const reps = 1 << 18
	type side struct {
		name string
		run  func(p []byte) time.Duration
	}
	empty := side{"empty assembly call", func(p []byte) time.Duration {
		return timeIt(func() {
			var s uint64
			for range reps {
				s ^= uint64(floor.EmptyUpdate(0, p))
			}
			sink += s
		})
	}}
	crcs := []struct {
		name     string
		checksum func(p []byte, reps int) uint64
		isal     func(p []byte, reps int) time.Duration
	}{
		{"t10dif", anchorT10DIF.checksum, anchorT10DIF.isalChecksum},
		{"crc32c", anchorCRC32C.checksum, anchorCRC32C.isalChecksum},
		{"crc64nvme", anchorCRC64.checksum, anchorCRC64.isalChecksum},
	}
	var rows []string
	for _, n := range []int{16, 64, 256, 512} {
		p := buf2[:n]
		sides := []side{empty, {"empty C call", func(p []byte) time.Duration { return timeEmptyC(p, reps) }}}
		for _, c := range crcs {
			sides = append(sides,
				side{"difctl " + c.name, func(p []byte) time.Duration {
					return timeIt(func() { sink += c.checksum(p, reps) })
				}},
				side{"ISA-L " + c.name, func(p []byte) time.Duration { return c.isal(p, reps) }})
		}
		times := make([][]float64, len(sides))
		b.Run(fmt.Sprintf("size=%dB", n), func(b *testing.B) {
			round := 0
			for b.Loop() {
				for i := range sides {
					k := (i + round) % len(sides) // a different order each round
					times[k] = append(times[k], float64(sides[k].run(p))/reps)
				}
				round++
			}
		})
		for i, s := range sides {
			if len(times[i]) == 0 {
				continue
			}
			slices.Sort(times[i])
			rows = append(rows, fmt.Sprintf("| %d B | %s | %.2f |", n, s.name, times[i][len(times[i])/2]))
		}
	}
	fmt.Println("| size | call | ns per call |\n|---|---|---:|")
	for _, r := range rows {
		fmt.Println(r)
	}
}
