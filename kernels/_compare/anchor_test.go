package compare

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/difctl/difctl/kernels"
	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/kernels/crc64nvme"
	"github.com/difctl/difctl/kernels/crct10dif"
	"github.com/difctl/difctl/kernels/internal/kerneltest"
	"github.com/difctl/difctl/kernels/t10crc32c"
)

// BenchmarkAnchor measures difctl against the anchor, ISA-L 2.32.1's
// kernels of the tier its dispatcher picks on the CPU at hand (by16_10 on
// AVX-512 CPUs, AVX2 where VPCLMULQDQ exists without AVX-512; isal.go,
// build tag isal), as ratios taken in one
// run: every case times difctl and the peer over the same data in
// alternating rounds (the order swapped every round), one round per
// benchmark iteration, and reports the median over the rounds of the
// per-round ratio. Run it with a fixed number of rounds:
//
//	go test -tags isal -run '^$' -bench Anchor -benchtime 9x
//
// It prints the comparison table of docs/performance.md when it ends.
// Each side of a round runs for about -anchor.ms milliseconds, timed by the
// thread's CPU time (-anchor.clock=cpu, the default: a shared machine's
// preemptions are left out) or the wall clock (-anchor.clock=wall). The
// cases:
//
//   - crc=…/op=blocks/block=B/stride=S: one guard per block over 1 MiB of
//     B-byte blocks S bytes apart; difctl's Blocks against the peer called
//     once per block (ratio = peer time / difctl time, > 1 is difctl
//     faster);
//   - crc=…/op=checksum/size=N: independent Checksum calls on one buffer
//     (64 KiB and 1 MiB as throughput, 16-512 bytes as the fixed cost of a
//     call, in ns);
//   - crc=t10dif/op=blockscopy/block=B: BlocksCopy against
//     crc16_t10dif_copy per block, 1 MiB in cache;
//   - crc=t10crc32c/op=blocks|blockscopy/…: the guard and the CRC-32C of
//     every block, t10crc32c against two ISA-L calls per block (and with
//     the copy, a memcpy before them), 1 MiB in cache;
//   - op=mappedcopy/…: BlocksCopy and t10crc32c.BlocksCopy reading a 64 MiB
//     file through a read-only mapping of its page cache, 1 MiB at a time
//     into one reused buffer, against Go's copy of the same bytes (the peer
//     here is copy, not ISA-L; 64 MiB is twice the L3, so every pass
//     reads memory).
func BenchmarkAnchor(b *testing.B) {
	if anchorT10DIF.isalBlocks == nil {
		b.Skip("needs ISA-L 2.32.1: build tag isal (see README.md)")
	}
	if *anchorClock != "cpu" && *anchorClock != "wall" {
		b.Fatalf("-anchor.clock=%q: want cpu or wall", *anchorClock)
	}
	anchorSetClock(*anchorClock == "wall")
	if *anchorTierFlag != "" {
		restore, err := anchorSelectTier(*anchorTierFlag)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(restore)
	}
	var results []anchorResult
	for _, c := range anchorCases(b) {
		b.Run(c.name, func(b *testing.B) {
			// Every sub-benchmark runs on a goroutine of its own: lock
			// that one, so that its thread's CPU time is its own.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			results = append(results, runAnchor(b, c))
		})
	}
	printAnchorTable(results)
}

// anchorTierFlag picks a tier other than the one ISA-L's dispatcher picks
// on this CPU: "avx2" compares ISA-L's AVX2 kernels, called by name, with
// difctl's avx2 kernels, selected through the registry; so an AVX-512
// machine measures the AVX2 tier too (anchorSelectTier, isal_test.go).
var anchorTierFlag = flag.String("anchor.tier", "", "BenchmarkAnchor: the tier to compare (avx2), or empty for the one ISA-L's dispatcher picks here")

var anchorMs = flag.Int("anchor.ms", 10, "BenchmarkAnchor: milliseconds per side of a round")

// An anchorCase is one comparison: difctl and peer each run reps passes
// over bytes bytes and return the time taken.
type anchorCase struct {
	name     string
	row, col string // where it goes in the printed table
	bytes    int64  // per pass
	perCall  bool   // report ns per call (bytes per call) rather than GB/s
	difctl   func(reps int) time.Duration
	peer     func(reps int) time.Duration
}

type anchorResult struct {
	anchorCase
	ratio          float64 // median of peer/difctl time
	difctl, peerGB float64 // median GB/s, or ns per call when perCall
}

// anchorCRC is what BenchmarkAnchor needs of one CRC; isal_test.go sets
// the ISA-L timers.
type anchorCRC[T kerneltest.Word] struct {
	name         string
	blocks       func(dst []T, p []byte, blockLen, stride int) error
	checksum     func(p []byte, reps int) uint64 // XOR of reps Checksum(p)
	isalBlocks   func(dst []T, p []byte, blockLen, stride, reps int) time.Duration
	isalChecksum func(p []byte, reps int) time.Duration
}

var (
	anchorT10DIF = anchorCRC[uint16]{name: "t10dif", blocks: crct10dif.Blocks,
		checksum: func(p []byte, reps int) (s uint64) {
			for range reps {
				s ^= uint64(crct10dif.Checksum(p))
			}
			return s
		}}
	anchorCRC32C = anchorCRC[uint32]{name: "crc32c", blocks: crc32c.Blocks,
		checksum: func(p []byte, reps int) (s uint64) {
			for range reps {
				s ^= uint64(crc32c.Checksum(p))
			}
			return s
		}}
	anchorCRC64 = anchorCRC[uint64]{name: "crc64nvme", blocks: crc64nvme.Blocks,
		checksum: func(p []byte, reps int) (s uint64) {
			for range reps {
				s ^= crc64nvme.Checksum(p)
			}
			return s
		}}
	// anchorPeer names the ISA-L kernels compared with (isal_test.go).
	anchorPeer string
	// anchorPeerTier names the ISA-L tier compared with, for the table's
	// title: "AVX-512", "AVX2" or "SSE/PCLMULQDQ" (isal_test.go).
	anchorPeerTier string
	// anchorSelectTier makes BenchmarkAnchor compare the tier named by
	// -anchor.tier on both sides and returns what undoes it (isal_test.go).
	anchorSelectTier func(tier string) (restore func(), err error)
	// anchorT10DIFCopy times crc16_t10dif_copy per block (isal_test.go).
	anchorT10DIFCopy func(dst []uint16, q, p []byte, blockLen, stride, reps int) time.Duration
	// anchorPair times the guard and the CRC-32C of every block by two
	// ISA-L calls per block, after a memcpy of the block to q if q is not
	// nil (isal_test.go).
	anchorPair func(dst []uint16, sums []uint32, q, p []byte, blockLen, stride, reps int) time.Duration
)

// anchorLayouts are the block layouts of the Blocks cases.
var anchorLayouts = [][2]int{{512, 512}, {512, 520}, {4096, 4096}, {4096, 4104}, {4096, 4112}}

var anchorClock = flag.String("anchor.clock", "cpu", "BenchmarkAnchor: time by the thread's CPU time (cpu) or the wall clock (wall)")

// anchorSetClock tells the ISA-L timers which clock to read (isal_test.go).
var anchorSetClock func(wall bool)

// now reads the clock of -anchor.clock. The benchmark thread is locked to
// its OS thread, so its CPU time is that of the code timed: on a shared
// machine, the time the thread waits for a CPU is left out, the time it
// runs slower beside another process is not.
func now() time.Duration {
	if *anchorClock == "wall" {
		return time.Duration(time.Now().UnixNano())
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		panic(err)
	}
	return time.Duration(ts.Nano())
}

func timeIt(f func()) time.Duration {
	t := now()
	f()
	return now() - t
}

func crcCases[T kerneltest.Word](k anchorCRC[T]) []anchorCase {
	var cs []anchorCase
	impl := kernels.Active(map[string]string{"t10dif": "crct10dif", "crc32c": "crc32c", "crc64nvme": "crc64nvme"}[k.name])
	for _, l := range anchorLayouts {
		bl, stride := l[0], l[1]
		n := (1 << 20) / bl
		p := buf2[:(n-1)*stride+bl]
		dst := make([]T, n)
		cs = append(cs, anchorCase{
			name:  fmt.Sprintf("crc=%s/impl=%s/op=blocks/block=%d/stride=%d", k.name, impl, bl, stride),
			row:   fmt.Sprintf("Blocks %d / stride %d", bl, stride),
			col:   k.name,
			bytes: int64(n * bl),
			difctl: func(reps int) time.Duration {
				return timeIt(func() {
					for range reps {
						must(k.blocks(dst, p, bl, stride))
					}
				})
			},
			peer: func(reps int) time.Duration { return k.isalBlocks(dst, p, bl, stride, reps) },
		})
	}
	for _, n := range []int{16, 64, 256, 512, 64 << 10, 1 << 20} {
		p := buf2[:n]
		perCall := n <= 512
		row := "Checksum " + kerneltest.SizeName(n)
		if perCall {
			row += " (ns per call)"
		}
		cs = append(cs, anchorCase{
			name:    fmt.Sprintf("crc=%s/impl=%s/op=checksum/size=%s", k.name, impl, kerneltest.SizeName(n)),
			row:     row,
			col:     k.name,
			bytes:   int64(n),
			perCall: perCall,
			difctl: func(reps int) time.Duration {
				return timeIt(func() { sink += k.checksum(p, reps) })
			},
			peer: func(reps int) time.Duration { return k.isalChecksum(p, reps) },
		})
	}
	return cs
}

// buf2 holds 1 MiB of blocks at the widest stride (8 bytes per 512),
// random bytes.
var buf2 = func() []byte {
	b := make([]byte, (1<<20)/512*520)
	r := rand.New(rand.NewPCG(8, 9))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}()

func anchorCases(b *testing.B) []anchorCase {
	cs := crcCases(anchorT10DIF)
	cs = append(cs, crcCases(anchorCRC32C)...)
	cs = append(cs, crcCases(anchorCRC64)...)
	impl := kernels.Active("crct10dif")
	for _, bl := range []int{512, 4096} {
		n := (1 << 20) / bl
		p, q := buf[:n*bl], make([]byte, n*bl)
		dst := make([]uint16, n)
		cs = append(cs, anchorCase{
			name:  fmt.Sprintf("crc=t10dif/impl=%s/op=blockscopy/block=%d", impl, bl),
			row:   fmt.Sprintf("BlocksCopy %d vs crc16_t10dif_copy", bl),
			col:   "t10dif",
			bytes: int64(n * bl),
			difctl: func(reps int) time.Duration {
				return timeIt(func() {
					for range reps {
						must(crct10dif.BlocksCopy(dst, q, p, bl, bl))
					}
				})
			},
			peer: func(reps int) time.Duration { return anchorT10DIFCopy(dst, q, p, bl, bl, reps) },
		})
	}
	cs = append(cs, pairCases()...)
	return append(cs, mappedCases(b)...)
}

// pairCases are the crc=t10crc32c cases: the guard and the CRC-32C sector
// sum of every block, t10crc32c.Blocks against two ISA-L calls per block,
// and t10crc32c.BlocksCopy against a memcpy of the block and the two calls
// over the copy; 1 MiB of blocks in cache.
func pairCases() []anchorCase {
	var cs []anchorCase
	impl := kernels.Active("t10crc32c")
	for _, l := range [][2]int{{512, 512}, {512, 520}, {4096, 4096}, {4096, 4104}} {
		bl, stride := l[0], l[1]
		n := (1 << 20) / bl
		p := buf2[:(n-1)*stride+bl]
		q := make([]byte, len(p))
		dst, sums := make([]uint16, n), make([]uint32, n)
		for _, copying := range []bool{false, true} {
			c := anchorCase{
				name:  fmt.Sprintf("crc=t10crc32c/impl=%s/op=blocks/block=%d/stride=%d", impl, bl, stride),
				row:   fmt.Sprintf("Blocks %d / stride %d", bl, stride),
				col:   "t10crc32c vs 2 calls",
				bytes: int64(n * bl),
				difctl: func(reps int) time.Duration {
					return timeIt(func() {
						for range reps {
							must(t10crc32c.Blocks(dst, sums, p, bl, stride))
						}
					})
				},
				peer: func(reps int) time.Duration { return anchorPair(dst, sums, nil, p, bl, stride, reps) },
			}
			if copying {
				c.name = fmt.Sprintf("crc=t10crc32c/impl=%s/op=blockscopy/block=%d/stride=%d", impl, bl, stride)
				c.col = "t10crc32c copying vs memcpy + 2 calls"
				c.difctl = func(reps int) time.Duration {
					return timeIt(func() {
						for range reps {
							must(t10crc32c.BlocksCopy(dst, sums, q, p, bl, stride))
						}
					})
				}
				c.peer = func(reps int) time.Duration { return anchorPair(dst, sums, q, p, bl, stride, reps) }
			}
			cs = append(cs, c)
		}
	}
	return cs
}

// mappedCases are the op=mappedcopy cases: the copying kernels reading a
// page-cached file through a read-only mapping, against copy.
func mappedCases(b *testing.B) []anchorCase {
	const size, chunk = kerneltest.DRAMSize, 1 << 20
	path := filepath.Join(b.TempDir(), "mapped")
	data := make([]byte, size)
	r := rand.New(rand.NewPCG(10, 11))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		b.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	// MAP_POPULATE maps every page of the page cache up front, so the
	// timed passes read memory rather than take page faults.
	m, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { syscall.Munmap(m) })
	q := make([]byte, chunk)
	goCopy := func(reps int) time.Duration {
		return timeIt(func() {
			for range reps {
				for o := 0; o < size; o += chunk {
					copy(q, m[o:o+chunk])
				}
			}
		})
	}
	var cs []anchorCase
	for _, bl := range []int{512, 4096} {
		n := chunk / bl
		d16, d64, sums := make([]uint16, n), make([]uint64, n), make([]uint32, n)
		for _, k := range []struct {
			name string
			run  func(p []byte)
		}{
			{"crct10dif.BlocksCopy", func(p []byte) { must(crct10dif.BlocksCopy(d16, q, p, bl, bl)) }},
			{"t10crc32c.BlocksCopy", func(p []byte) { must(t10crc32c.BlocksCopy(d16, sums, q, p, bl, bl)) }},
			{"crc64nvme.BlocksCopy", func(p []byte) { must(crc64nvme.BlocksCopy(d64, q, p, bl, bl)) }},
		} {
			cs = append(cs, anchorCase{
				name:  fmt.Sprintf("op=mappedcopy/kernel=%s/block=%d", k.name, bl),
				row:   fmt.Sprintf("%d MiB mapping, block %d, vs Go copy", size>>20, bl),
				col:   k.name,
				bytes: size,
				difctl: func(reps int) time.Duration {
					return timeIt(func() {
						for range reps {
							for o := 0; o < size; o += chunk {
								k.run(m[o : o+chunk])
							}
						}
					})
				},
				peer: goCopy,
			})
		}
	}
	return cs
}

// runAnchor runs the rounds of one case, one per b.Loop iteration.
func runAnchor(b *testing.B, c anchorCase) anchorResult {
	// Calibrate: reps passes take about anchorMs on the difctl side.
	reps := 1
	for c.difctl(reps) < time.Duration(*anchorMs)*time.Millisecond/2 && reps < 1<<30 {
		reps *= 2
	}
	var ratios, dt, pt []float64
	i := 0
	for b.Loop() {
		var d, p time.Duration
		if i%2 == 0 {
			d, p = c.difctl(reps), c.peer(reps)
		} else {
			p, d = c.peer(reps), c.difctl(reps)
		}
		i++
		ratios = append(ratios, float64(p)/float64(d))
		dt = append(dt, float64(d)/float64(reps))
		pt = append(pt, float64(p)/float64(reps))
	}
	res := anchorResult{anchorCase: c, ratio: median(ratios)}
	if c.perCall {
		res.difctl, res.peerGB = median(dt), median(pt)
		b.ReportMetric(res.difctl, "difctl-ns/call")
		b.ReportMetric(res.peerGB, "peer-ns/call")
	} else {
		res.difctl, res.peerGB = float64(c.bytes)/median(dt), float64(c.bytes)/median(pt)
		b.ReportMetric(res.difctl, "difctl-GB/s")
		b.ReportMetric(res.peerGB, "peer-GB/s")
	}
	b.ReportMetric(res.ratio, "ratio")
	b.ReportMetric(float64(len(ratios)), "rounds")
	return res
}

func activeImpls() string {
	var s []string
	for _, p := range kernels.Packages {
		s = append(s, p+"="+kernels.Active(p))
	}
	return strings.Join(s, ",")
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// printAnchorTable prints the results as a Markdown table, one row per
// case kind, one column per kernel: the ratio (difctl / peer, > 1 is
// difctl faster), and difctl's and the peer's figures.
func printAnchorTable(rs []anchorResult) {
	var rows, cols []string
	cell := map[[2]string]anchorResult{}
	for _, r := range rs {
		if !slices.Contains(rows, r.row) {
			rows = append(rows, r.row)
		}
		if !slices.Contains(cols, r.col) {
			cols = append(cols, r.col)
		}
		cell[[2]string{r.row, r.col}] = r
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nBenchmarkAnchor against ISA-L's %s tier: peer %s; difctl %s; clock %s.\n", anchorPeerTier, anchorPeer, activeImpls(), *anchorClock)
	fmt.Fprintf(&sb, "Cells: ratio difctl/peer (median of per-round ratios), then difctl | peer (GB/s, or ns per call).\n\n")
	fmt.Fprintf(&sb, "| case | %s |\n|---|%s\n", strings.Join(cols, " | "), strings.Repeat("---:|", len(cols)))
	for _, row := range rows {
		fmt.Fprintf(&sb, "| %s |", row)
		for _, col := range cols {
			r, ok := cell[[2]string{row, col}]
			if !ok {
				sb.WriteString(" |")
				continue
			}
			if r.perCall {
				fmt.Fprintf(&sb, " %.2f (%.1f \\| %.1f ns) |", r.ratio, r.difctl, r.peerGB)
			} else {
				fmt.Fprintf(&sb, " %.2f (%.1f \\| %.1f) |", r.ratio, r.difctl, r.peerGB)
			}
		}
		sb.WriteString("\n")
	}
	fmt.Print(sb.String())
}
