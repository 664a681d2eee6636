package piscan

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/difctl/difctl/kernels/internal/impl"
	"github.com/difctl/difctl/kernels/internal/kerneltest"
)

// oracle is Scan16 by the letter of the package doc, one block at a time,
// with the escape as a comparison of the app tag with 0xFFFF.
func oracle(t [][8]byte, g []uint16, e, step, mask uint64, esc bool) uint64 {
	var r uint64
	for j := range min(len(t), len(g)) {
		w := binary.BigEndian.Uint64(t[j][:])
		r |= (w ^ (uint64(g[j])<<48 | e)) & mask
		if esc && w>>32&0xFFFF == 0xFFFF {
			r |= 1 << 48
		}
		e += step
	}
	return r
}

// run is a run of n blocks whose tuples all match: random guards, a
// random app tag other than 0xFFFF, ref tags from e on.
type run struct {
	t       [][8]byte
	g       []uint16
	e, step uint64
}

func newRun(r *rand.Rand, n int, step uint64) *run {
	app := uint64(r.IntN(0xFFFF))
	x := &run{t: make([][8]byte, n), g: make([]uint16, n), e: app<<32 | uint64(r.Uint32()>>1), step: step}
	e := x.e
	for j := range n {
		x.g[j] = uint16(r.Uint32())
		binary.BigEndian.PutUint64(x.t[j][:], uint64(x.g[j])<<48|e)
		e += step
	}
	return x
}

// The failure kinds planted in a tuple (or its computed guard).
var kinds = []struct {
	name string
	fn   func(x *run, j int, r *rand.Rand)
}{
	{"guard", func(x *run, j int, r *rand.Rand) { x.g[j] ^= 1 << r.IntN(16) }},
	{"storedguard", func(x *run, j int, r *rand.Rand) { x.t[j][r.IntN(2)] ^= 1 << r.IntN(8) }},
	{"app", func(x *run, j int, r *rand.Rand) { x.t[j][2+r.IntN(2)] ^= 1 << r.IntN(8) }},
	{"ref", func(x *run, j int, r *rand.Rand) { x.t[j][4+r.IntN(4)] ^= 1 << r.IntN(8) }},
	{"escape", func(x *run, j int, r *rand.Rand) { x.t[j][2], x.t[j][3] = 0xFF, 0xFF }},
}

// check compares both scans of x under mask with the oracle.
func check(t *testing.T, x *run, mask uint64, what string) {
	t.Helper()
	for _, esc := range []bool{true, false} {
		got := Scan16NoEscape(x.t, x.g, x.e, x.step, mask)
		if esc {
			got = Scan16(x.t, x.g, x.e, x.step, mask)
		}
		if want := oracle(x.t, x.g, x.e, x.step, mask, esc); got != want {
			t.Fatalf("%s: n=%d esc=%v mask=%#x step=%d: got %#x, want %#x", what, len(x.g), esc, mask, x.step, got, want)
		}
	}
}

// shortPlant are the run lengths -short plants failures in: every lane of
// both chains of either vector width, the single-vector step, the tails,
// and a long run.
var shortPlant = map[int]bool{7: true, 8: true, 9: true, 15: true, 16: true, 17: true, 23: true,
	24: true, 31: true, 32: true, 33: true, 39: true, 47: true, 70: true, 257: true}

// plantIn reports whether the tests plant failures in runs of n blocks:
// all of them, or with -short those of shortPlant.
func plantIn(n int) bool { return !testing.Short() || shortPlant[n] }

// TestScan16 plants each failure kind in every block of runs of every length
// 0..70 (every lane of the vector kernels' two chains, their single-vector
// step and the generic tail) and of some long ones, and compares every
// implementation's word with the oracle's, under the full mask, with the
// app tag unchecked, and with the guard unchecked. A planted failure under
// the full mask must also be flagged (non-zero).
func TestScan16(t *testing.T) {
	kerneltest.ForEach(t, pkgName, func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 2))
		lengths := []int{}
		for n := 0; n <= 70; n++ {
			lengths = append(lengths, n)
		}
		lengths = append(lengths, 255, 256, 257, 1000, 2048+7)
		masks := []uint64{^uint64(0), 0xFFFF<<48 | 0xFFFFFFFF, 0xFFFFFFFFFFFF}
		for _, n := range lengths {
			for _, step := range []uint64{1, 0} {
				x := newRun(r, n, step)
				for _, mask := range masks {
					check(t, x, mask, "clean")
				}
				if Scan16(x.t, x.g, x.e, x.step, ^uint64(0)) != 0 {
					t.Fatalf("n=%d: a clean run flagged", n)
				}
				at := make([]int, 0, n)
				for j := range n {
					if plantIn(n) && (n <= 70 || j < 40 || j >= n-40 || r.IntN(16) == 0) {
						at = append(at, j)
					}
				}
				for _, j := range at {
					for _, k := range kinds {
						tu, g := x.t[j], x.g[j]
						k.fn(x, j, r)
						what := fmt.Sprintf("kind=%s/at=%d", k.name, j)
						for _, mask := range masks {
							check(t, x, mask, what)
						}
						if Scan16(x.t, x.g, x.e, x.step, ^uint64(0)) == 0 {
							t.Fatalf("%s n=%d: not flagged", what, n)
						}
						x.t[j], x.g[j] = tu, g
					}
				}
			}
		}
	})
}

// TestScan16Random compares every implementation with the oracle on random
// tuples, guards, masks and steps, with e near the wrap of 2^64.
func TestScan16Random(t *testing.T) {
	kerneltest.ForEach(t, pkgName, func(t *testing.T) {
		r := rand.New(rand.NewPCG(5, 6))
		for i := range 2000 {
			n := r.IntN(100)
			x := &run{t: make([][8]byte, n), g: make([]uint16, n), e: r.Uint64(), step: r.Uint64()}
			if i%2 == 0 {
				x.e, x.step = ^uint64(0)-uint64(r.IntN(64)), uint64(r.IntN(3))
			}
			for j := range n {
				binary.LittleEndian.PutUint64(x.t[j][:], r.Uint64())
				x.g[j] = uint16(r.Uint32())
			}
			check(t, x, r.Uint64()&r.Uint64(), "random")
		}
	})
}

// TestScanShort holds the scans to the shorter of their slices.
func TestScanShort(t *testing.T) {
	kerneltest.ForEach(t, pkgName, func(t *testing.T) {
		r := rand.New(rand.NewPCG(7, 8))
		x := newRun(r, 40, 1)
		x.t[30][0] ^= 1
		if got := Scan16(x.t[:30], x.g, x.e, 1, ^uint64(0)); got != 0 {
			t.Fatalf("scanned beyond t: %#x", got)
		}
		if got := Scan16NoEscape(x.t, x.g[:30], x.e, 1, ^uint64(0)); got != 0 {
			t.Fatalf("scanned beyond g: %#x", got)
		}
		if Scan16(nil, x.g, 0, 0, ^uint64(0)) != 0 || Scan16NoEscape(x.t, nil, 0, 0, ^uint64(0)) != 0 {
			t.Fatal("empty scan not zero")
		}
		y := newRun64(r, 40, 1)
		y.t[30][0] ^= 1
		if got := Scan64(y.t[:30], y.g, y.e, 1, ^uint64(0), ^uint64(0)); got != 0 {
			t.Fatalf("scanned beyond t: %#x", got)
		}
		if got := Scan64NoEscape(y.t, y.g[:30], y.e, 1, ^uint64(0), ^uint64(0)); got != 0 {
			t.Fatalf("scanned beyond g: %#x", got)
		}
		if Scan64(nil, y.g, 0, 0, ^uint64(0), ^uint64(0)) != 0 || Scan64NoEscape(y.t, nil, 0, 0, ^uint64(0), ^uint64(0)) != 0 {
			t.Fatal("empty scan not zero")
		}
	})
}

func TestImplementations(t *testing.T) {
	kerneltest.CheckImplementations(t, pkgName, wants()...)
}

// FuzzScan runs every implementation against the oracles: the input's
// bytes are the 8-byte tuples, then their guards, and the same bytes are
// the 16-byte tuples, then theirs.
func FuzzScan(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 0xFF, 0xFF, 6, 7}, uint64(0), uint64(1), ^uint64(0), ^uint64(0))
	f.Add(make([]byte, 200), ^uint64(0), uint64(1), uint64(0xFFFF), uint64(0xFFFF))
	f.Fuzz(func(t *testing.T, b []byte, e, step, mask, gm uint64) {
		n := len(b) / 10
		x := &run{t: make([][8]byte, n), g: make([]uint16, n), e: e, step: step}
		for j := range n {
			copy(x.t[j][:], b[8*j:])
			x.g[j] = binary.LittleEndian.Uint16(b[8*n+2*j:])
		}
		n = len(b) / 24
		y := &run64{t: make([][16]byte, n), g: make([]uint64, n), e: e, step: step}
		for j := range n {
			copy(y.t[j][:], b[16*j:])
			y.g[j] = binary.LittleEndian.Uint64(b[16*n+8*j:])
		}
		defer impl.Reset(pkgName)
		for _, im := range impl.List(pkgName) {
			if !im.Available {
				continue
			}
			if err := impl.Select(pkgName, im.Name); err != nil {
				t.Fatal(err)
			}
			check(t, x, mask, "impl="+im.Name)
			check64(t, y, gm, mask, "impl="+im.Name)
		}
	})
}

// benchSizes are the runs the benchmarks scan: a 4 KiB read of 512-byte
// blocks, dif's chunk, and 2048 tuples.
var benchSizes = []int{8, 256, 2048}

// BenchmarkScan16 scans 8-byte tuples that all pass (the common case), with
// and without the escape term.
func BenchmarkScan16(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 10))
	x := newRun(r, 2048, 1)
	kerneltest.ForEachB(b, pkgName, func(b *testing.B) {
		for _, n := range benchSizes {
			for _, esc := range []bool{true, false} {
				t, g := x.t[:n], x.g[:n]
				b.Run(fmt.Sprintf("esc=%v/n=%d", esc, n), func(b *testing.B) {
					b.SetBytes(int64(8 * n))
					var sink uint64
					for b.Loop() {
						if esc {
							sink |= Scan16(t, g, x.e, x.step, ^uint64(0))
						} else {
							sink |= Scan16NoEscape(t, g, x.e, x.step, ^uint64(0))
						}
					}
					if sink != 0 {
						b.Fatal("a clean run flagged")
					}
				})
			}
		}
	})
}

// oracle64 is Scan64 by the letter of the package doc, one block at a
// time, with the escape as a comparison of the app tag with 0xFFFF.
func oracle64(t [][16]byte, g []uint64, e, step, gm, mask uint64, esc bool) uint64 {
	var r uint64
	for j := range min(len(t), len(g)) {
		w0 := binary.BigEndian.Uint64(t[j][:8])
		w1 := binary.BigEndian.Uint64(t[j][8:])
		r |= (w0^g[j])&gm | (w1^e)&mask
		if esc && w1>>48 == 0xFFFF {
			r |= 1
		}
		e += step
	}
	return r
}

// run64 is a run of n blocks with 16-byte tuples that all match.
type run64 struct {
	t       [][16]byte
	g       []uint64
	e, step uint64
}

func newRun64(r *rand.Rand, n int, step uint64) *run64 {
	app := uint64(r.IntN(0xFFFF))
	x := &run64{t: make([][16]byte, n), g: make([]uint64, n), e: app<<48 | r.Uint64()>>17, step: step}
	e := x.e
	for j := range n {
		x.g[j] = r.Uint64()
		binary.BigEndian.PutUint64(x.t[j][:8], x.g[j])
		binary.BigEndian.PutUint64(x.t[j][8:], e)
		e += step
	}
	return x
}

var kinds64 = []struct {
	name string
	fn   func(x *run64, j int, r *rand.Rand)
}{
	{"guard", func(x *run64, j int, r *rand.Rand) { x.g[j] ^= 1 << r.IntN(64) }},
	{"storedguard", func(x *run64, j int, r *rand.Rand) { x.t[j][r.IntN(8)] ^= 1 << r.IntN(8) }},
	{"app", func(x *run64, j int, r *rand.Rand) { x.t[j][8+r.IntN(2)] ^= 1 << r.IntN(8) }},
	{"ref", func(x *run64, j int, r *rand.Rand) { x.t[j][10+r.IntN(6)] ^= 1 << r.IntN(8) }},
	{"escape", func(x *run64, j int, r *rand.Rand) { x.t[j][8], x.t[j][9] = 0xFF, 0xFF }},
}

func check64(t *testing.T, x *run64, gm, mask uint64, what string) {
	t.Helper()
	for _, esc := range []bool{true, false} {
		got := Scan64NoEscape(x.t, x.g, x.e, x.step, gm, mask)
		if esc {
			got = Scan64(x.t, x.g, x.e, x.step, gm, mask)
		}
		if want := oracle64(x.t, x.g, x.e, x.step, gm, mask, esc); got != want {
			t.Fatalf("%s: n=%d esc=%v gm=%#x mask=%#x step=%d: got %#x, want %#x", what, len(x.g), esc, gm, mask, x.step, got, want)
		}
	}
}

// TestScan64 is TestScan16 for the 16-byte tuples of the 64-bit guard.
func TestScan64(t *testing.T) {
	kerneltest.ForEach(t, pkgName, func(t *testing.T) {
		r := rand.New(rand.NewPCG(3, 4))
		lengths := []int{}
		for n := 0; n <= 70; n++ {
			lengths = append(lengths, n)
		}
		lengths = append(lengths, 255, 256, 257, 1000, 2048+7)
		masks := [][2]uint64{{^uint64(0), ^uint64(0)}, {^uint64(0), 0xFFFFFFFFFFFF}, {0, ^uint64(0)}}
		for _, n := range lengths {
			for _, step := range []uint64{1, 0} {
				x := newRun64(r, n, step)
				for _, m := range masks {
					check64(t, x, m[0], m[1], "clean")
				}
				if Scan64(x.t, x.g, x.e, x.step, ^uint64(0), ^uint64(0)) != 0 {
					t.Fatalf("n=%d: a clean run flagged", n)
				}
				for j := range n {
					if !plantIn(n) || n > 70 && j >= 40 && j < n-40 && r.IntN(16) != 0 {
						continue
					}
					for _, k := range kinds64 {
						tu, g := x.t[j], x.g[j]
						k.fn(x, j, r)
						what := fmt.Sprintf("kind=%s/at=%d", k.name, j)
						for _, m := range masks {
							check64(t, x, m[0], m[1], what)
						}
						if Scan64(x.t, x.g, x.e, x.step, ^uint64(0), ^uint64(0)) == 0 {
							t.Fatalf("%s n=%d: not flagged", what, n)
						}
						x.t[j], x.g[j] = tu, g
					}
				}
			}
		}
	})
}

// TestScan64Random is TestScan16Random for the 16-byte tuples.
func TestScan64Random(t *testing.T) {
	kerneltest.ForEach(t, pkgName, func(t *testing.T) {
		r := rand.New(rand.NewPCG(13, 14))
		for i := range 2000 {
			n := r.IntN(100)
			x := &run64{t: make([][16]byte, n), g: make([]uint64, n), e: r.Uint64(), step: r.Uint64()}
			if i%2 == 0 {
				x.e, x.step = ^uint64(0)-uint64(r.IntN(64)), uint64(r.IntN(3))
			}
			for j := range n {
				binary.LittleEndian.PutUint64(x.t[j][:8], r.Uint64())
				binary.LittleEndian.PutUint64(x.t[j][8:], r.Uint64())
				x.g[j] = r.Uint64()
			}
			check64(t, x, r.Uint64()&r.Uint64(), r.Uint64()&r.Uint64(), "random")
		}
	})
}

// BenchmarkScan64 scans 16-byte tuples that all pass.
func BenchmarkScan64(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 10))
	x := newRun64(r, 2048, 1)
	kerneltest.ForEachB(b, pkgName, func(b *testing.B) {
		for _, n := range benchSizes {
			for _, esc := range []bool{true, false} {
				t, g := x.t[:n], x.g[:n]
				b.Run(fmt.Sprintf("esc=%v/n=%d", esc, n), func(b *testing.B) {
					b.SetBytes(int64(16 * n))
					var sink uint64
					for b.Loop() {
						if esc {
							sink |= Scan64(t, g, x.e, x.step, ^uint64(0), ^uint64(0))
						} else {
							sink |= Scan64NoEscape(t, g, x.e, x.step, ^uint64(0), ^uint64(0))
						}
					}
					if sink != 0 {
						b.Fatal("a clean run flagged")
					}
				})
			}
		}
	})
}
