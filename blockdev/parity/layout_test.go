package parity

import (
	"errors"
	"fmt"
	"testing"
)

func mustLayout(t testing.TB, o Options) Layout {
	t.Helper()
	l, err := NewLayout(o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestNewLayoutRefuses(t *testing.T) {
	good := Options{Data: 4, Parity: 2, BlockSize: 4096, Blocks: 100}
	for _, tc := range []struct {
		name string
		edit func(*Options)
	}{
		{"k=0", func(o *Options) { o.Data = 0 }},
		{"m=0", func(o *Options) { o.Parity = 0 }},
		{"m>k", func(o *Options) { o.Data, o.Parity = 2, 3 }},
		{"k+m=257", func(o *Options) { o.Data, o.Parity = 200, 57 }},
		{"k=-1", func(o *Options) { o.Data = -1 }},
		{"bs=0", func(o *Options) { o.BlockSize = 0 }},
		{"bs=256", func(o *Options) { o.BlockSize = 256 }},
		{"bs=4097", func(o *Options) { o.BlockSize = 4097 }},
		{"bs=128k", func(o *Options) { o.BlockSize = 128 << 10 }},
		{"blocks=0", func(o *Options) { o.Blocks = 0 }},
		{"blocks=-5", func(o *Options) { o.Blocks = -5 }},
		{"blocks=huge", func(o *Options) { o.Blocks = 1 << 62 }},
		{"depth=-2", func(o *Options) { o.Depth = -2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := good
			tc.edit(&o)
			if _, err := NewLayout(o); !errors.Is(err, ErrInvalidLayout) {
				t.Fatalf("NewLayout(%+v) = %v, want ErrInvalidLayout", o, err)
			}
		})
	}
	for _, o := range []Options{good, {Data: 255, Parity: 1, BlockSize: 512, Blocks: 1}, {Data: 128, Parity: 128, BlockSize: 65536, Blocks: 1 << 40, Depth: WholeVolume}} {
		if _, err := NewLayout(o); err != nil {
			t.Errorf("NewLayout(%+v): %v", o, err)
		}
	}
}

// checkLayout checks every invariant of l over all its blocks and stripes:
// Locate and Block are inverse, positions fill in order, no stripe is
// empty, StripeLen counts the blocks, the parity offsets tile the file.
func checkLayout(t testing.TB, l Layout) {
	t.Helper()
	k, m := l.DataShards(), l.ParityShards()
	s := l.Stripes()
	count := make([]int, s)
	for i := range l.Blocks() {
		st, pos := l.Locate(i)
		if st < 0 || st >= s || pos < 0 || pos >= k {
			t.Fatalf("%v: Locate(%d) = %d, %d", l, i, st, pos)
		}
		if b, ok := l.Block(st, pos); !ok || b != i {
			t.Fatalf("%v: Block(Locate(%d) = %d, %d) = %d, %v", l, i, st, pos, b, ok)
		}
		count[st]++
	}
	var blocks []int64
	for st := range s {
		n := l.StripeLen(st)
		if n < 1 || n != count[st] {
			t.Fatalf("%v: stripe %d: StripeLen %d, %d blocks located in it", l, st, n, count[st])
		}
		blocks = l.StripeBlocks(blocks[:0], st)
		for pos, b := range blocks {
			if (b >= 0) != (pos < n) {
				t.Fatalf("%v: stripe %d: blocks %v, length %d", l, st, blocks, n)
			}
		}
		for j := range m {
			if off, want := l.ParityOffset(st, j), (st*int64(m)+int64(j))*int64(l.BlockSize()); off != want {
				t.Fatalf("%v: ParityOffset(%d, %d) = %d, want %d", l, st, j, off, want)
			}
		}
	}
	if got := l.ParitySize(); got != s*int64(m)*int64(l.BlockSize()) {
		t.Fatalf("%v: ParitySize %d", l, got)
	}
	// S = ceil(N/k) for the two reference layouts; an intermediate depth
	// adds at most D stripes (m·D parity blocks) for its partial group.
	whole := (l.Blocks() + int64(k) - 1) / int64(k)
	if s < whole || s > whole+l.Depth() || (l.Depth() == 1 || l.Depth() == whole) && s != whole {
		t.Fatalf("%v: %d stripes, ceil(N/k) = %d", l, s, whole)
	}
}

// overRun returns the start of a run of n consecutive blocks that meets
// some stripe more than m times, or -1 if none does (a sliding window).
func overRun(l Layout, n int64, m int) int64 {
	hits := make([]int, l.Stripes())
	over := 0 // stripes met more than m times by the window
	add := func(i int64, d int) {
		s, _ := l.Locate(i)
		if hits[s] > m {
			over--
		}
		hits[s] += d
		if hits[s] > m {
			over++
		}
	}
	for i := range min(n, l.Blocks()) {
		add(i, 1)
	}
	for start := int64(0); ; start++ {
		if over > 0 {
			return start
		}
		if start+n >= l.Blocks() {
			return -1
		}
		add(start, -1)
		add(start+n, 1)
	}
}

func TestLayoutInvariants(t *testing.T) {
	for _, km := range [][2]int{{1, 1}, {3, 1}, {4, 2}, {8, 1}, {5, 5}, {16, 2}} {
		for _, n := range []int64{1, 2, 3, 7, 16, 17, 64, 100, 257, 1000} {
			for _, d := range []int64{0, Consecutive, 2, 3, 7, WholeVolume} {
				o := Options{Data: km[0], Parity: km[1], BlockSize: 512, Blocks: n, Depth: d}
				t.Run(fmt.Sprintf("k=%d/m=%d/n=%d/depth=%d", km[0], km[1], n, d), func(t *testing.T) {
					l := mustLayout(t, o)
					checkLayout(t, l)
					// The burst guarantee, tight: every run of m·D blocks
					// meets a stripe at most m times.
					run := l.BurstTolerance()
					if start := overRun(l, run, km[1]); start >= 0 {
						t.Fatalf("%v: the run of %d blocks from %d meets a stripe more than %d times", l, run, start, km[1])
					}
					// and tight: some run of m·D+1 blocks meets a stripe
					// m+1 times, unless the volume is shorter or has too
					// few blocks per stripe for it (m = k).
					if km[1] < km[0] && l.Depth() > 1 && run+1 <= l.Blocks() && l.Depth()*int64(km[0]) <= l.Blocks() && overRun(l, run+1, km[1]) < 0 {
						t.Fatalf("%v: no run of %d blocks meets a stripe %d times", l, run+1, km[1]+1)
					}
				})
			}
		}
	}
}

func TestLayoutReference(t *testing.T) {
	// WholeVolume is exactly dm-verity's interleave: i mod S, i div S.
	for _, n := range []int64{1, 5, 64, 99, 100, 101} {
		l := mustLayout(t, Options{Data: 4, Parity: 2, BlockSize: 512, Blocks: n, Depth: WholeVolume})
		s := (n + 3) / 4
		if l.Stripes() != s || l.Depth() != s || l.BurstTolerance() != 2*s {
			t.Fatalf("n=%d: %v", n, l)
		}
		for i := range n {
			if st, pos := l.Locate(i); st != i%s || int64(pos) != i/s {
				t.Fatalf("n=%d: Locate(%d) = %d, %d, want %d, %d", n, i, st, pos, i%s, i/s)
			}
		}
	}
	// Consecutive: stripe i div k, position i mod k; the last stripe short.
	l := mustLayout(t, Options{Data: 4, Parity: 2, BlockSize: 512, Blocks: 10, Depth: Consecutive})
	for i := range int64(10) {
		if st, pos := l.Locate(i); st != i/4 || int64(pos) != i%4 {
			t.Fatalf("Locate(%d) = %d, %d", i, st, pos)
		}
	}
	if got := l.StripeBlocks(nil, 2); fmt.Sprint(got) != "[8 9 -1 -1]" {
		t.Fatalf("StripeBlocks(2) = %v", got)
	}
	if l.BurstTolerance() != 2 {
		t.Fatalf("BurstTolerance %d", l.BurstTolerance())
	}
}

func TestLayoutDepth(t *testing.T) {
	// 4+2 depth 3 over 29 blocks: two full groups of 12 (stripes 0-5),
	// then R = 5 blocks at Dt = min(3, ceil(5/2)) = 3 (stripes 6-8).
	l := mustLayout(t, Options{Data: 4, Parity: 2, BlockSize: 512, Blocks: 29, Depth: 3})
	if l.Stripes() != 9 || l.ParitySize() != 9*2*512 {
		t.Fatalf("%v", l)
	}
	for _, tc := range []struct {
		s    int64
		want string
	}{
		{0, "[0 3 6 9]"}, {2, "[2 5 8 11]"}, {3, "[12 15 18 21]"},
		{6, "[24 27 -1 -1]"}, {7, "[25 28 -1 -1]"}, {8, "[26 -1 -1 -1]"},
	} {
		if got := fmt.Sprint(l.StripeBlocks(nil, tc.s)); got != tc.want {
			t.Errorf("StripeBlocks(%d) = %s, want %s", tc.s, got, tc.want)
		}
	}
	// A small partial group: R = 1 block, one stripe.
	l = mustLayout(t, Options{Data: 4, Parity: 2, BlockSize: 512, Blocks: 25, Depth: 3})
	if l.Stripes() != 7 || l.StripeLen(6) != 1 {
		t.Fatalf("%v", l)
	}
	// The default depth, clamped on a small volume.
	l = mustLayout(t, Options{Data: 16, Parity: 2, BlockSize: 4096, Blocks: 1000})
	if l.Depth() != 63 || l.Stripes() != 63 {
		t.Fatalf("%v", l)
	}
	l = mustLayout(t, Options{Data: 16, Parity: 2, BlockSize: 4096, Blocks: 1 << 20})
	if l.Depth() != DefaultDepth || l.Stripes() != 1<<16 || l.BurstTolerance() != 512 {
		t.Fatalf("%v", l)
	}
}

func TestLayoutPanics(t *testing.T) {
	l := mustLayout(t, Options{Data: 4, Parity: 2, BlockSize: 512, Blocks: 10})
	for name, f := range map[string]func(){
		"Locate(-1)":          func() { l.Locate(-1) },
		"Locate(N)":           func() { l.Locate(10) },
		"Block(S,0)":          func() { l.Block(l.Stripes(), 0) },
		"Block(0,k)":          func() { l.Block(0, 4) },
		"ParityOffset(0,m)":   func() { l.ParityOffset(0, 2) },
		"ParityOffset(-1,0)":  func() { l.ParityOffset(-1, 0) },
		"StripeLen(S)":        func() { l.StripeLen(l.Stripes()) },
		"NewSumPage(1)":       func() { l.NewSumPage(1) },
		"zero Layout Locate":  func() { Layout{}.Locate(0) },
		"zero Layout Block":   func() { Layout{}.Block(0, 0) },
		"zero Layout SumPage": func() { Layout{}.NewSumPage(0) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		}()
	}
}
