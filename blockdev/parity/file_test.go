package parity

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/faultdev"
)

func TestChecksumAddress(t *testing.T) {
	p := bytes.Repeat([]byte{0xa5}, 512)
	z := make([]byte, 512)
	seen := map[uint32]string{}
	for _, s := range []int64{0, 1, 2, 1 << 32, -1} {
		for j := range 3 {
			for name, b := range map[string][]byte{"a5": p, "zeros": z} {
				sum := Checksum(s, j, b)
				if prev, ok := seen[sum]; ok {
					t.Fatalf("Checksum(%d, %d, %s) = %08x, as %s", s, j, name, sum, prev)
				}
				seen[sum] = name
			}
		}
	}
}

// parityFixture is a parity file of l on a fault device over memory, with
// every stripe's parity encoded from random data and its checksums.
type parityFixture struct {
	l    Layout
	c    *Codec
	mem  *device.Mem
	dev  *faultdev.Device
	f    *File
	data [][]byte   // the volume's blocks
	par  [][]byte   // each stripe's parity, m·bs bytes
	sums [][]uint32 // each stripe's checksums
}

func newParityFixture(t testing.TB, o Options, seed uint64) *parityFixture {
	t.Helper()
	l := mustLayout(t, o)
	c, err := l.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	mem, err := device.NewMem(l.ParitySize(), 512)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := faultdev.New(mem, faultdev.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFile(dev, l)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(seed, 99))
	fx := &parityFixture{l: l, c: c, mem: mem, dev: dev, f: f, data: randBlocks(r, int(l.Blocks()), l.BlockSize())}
	for s := range l.Stripes() {
		buf := make([]byte, l.ParityShards()*l.BlockSize())
		sums := make([]uint32, l.ParityShards())
		if err := c.Encode(append(fx.stripeData(s), fx.split(buf)...)); err != nil {
			t.Fatal(err)
		}
		if err := f.Write(s, buf, sums); err != nil {
			t.Fatal(err)
		}
		fx.par = append(fx.par, buf)
		fx.sums = append(fx.sums, sums)
	}
	return fx
}

// stripeData returns the data blocks of stripe s (nil where missing).
func (fx *parityFixture) stripeData(s int64) [][]byte {
	d := make([][]byte, fx.l.DataShards())
	for pos := range d {
		if b, ok := fx.l.Block(s, pos); ok {
			d[pos] = fx.data[b]
		}
	}
	return d
}

// split returns the m blocks of a stripe's parity buffer.
func (fx *parityFixture) split(buf []byte) [][]byte {
	bs := fx.l.BlockSize()
	p := make([][]byte, fx.l.ParityShards())
	for j := range p {
		p[j] = buf[j*bs : (j+1)*bs : (j+1)*bs]
	}
	return p
}

func (fx *parityFixture) read(t testing.TB, s int64) ([]byte, []error, int) {
	t.Helper()
	buf := make([]byte, fx.l.ParityShards()*fx.l.BlockSize())
	errs := make([]error, fx.l.ParityShards())
	bad, err := fx.f.Read(s, buf, fx.sums[s], errs)
	if err != nil {
		t.Fatal(err)
	}
	return buf, errs, bad
}

func TestFileRoundTrip(t *testing.T) {
	fx := newParityFixture(t, Options{Data: 4, Parity: 2, BlockSize: 4096, Blocks: 37, Depth: 3}, 1)
	for s := range fx.l.Stripes() {
		buf, errs, bad := fx.read(t, s)
		if bad != 0 || !bytes.Equal(buf, fx.par[s]) {
			t.Fatalf("stripe %d: %d bad (%v)", s, bad, errs)
		}
	}
}

// TestFileDetectsDamage: a flipped bit, a stripe's parity moved to
// another stripe's place, and two blocks of one stripe swapped, each with
// their checksums (an integration that writes blocks and checksums to the
// wrong place alike), are reported as erasures: the checksum covers the
// block's address.
func TestFileDetectsDamage(t *testing.T) {
	fx := newParityFixture(t, Options{Data: 4, Parity: 2, BlockSize: 512, Blocks: 40, Depth: WholeVolume}, 2)
	l := fx.l
	// A bit flipped in stripe 1, block 1.
	if err := fx.dev.FlipBit(l.ParityOffset(1, 1)+100, 3); err != nil {
		t.Fatal(err)
	}
	// Stripe 3's parity and checksums put in stripe 5's place.
	if _, err := fx.dev.WriteAt(fx.par[3], l.ParityOffset(5, 0)); err != nil {
		t.Fatal(err)
	}
	fx.sums[5] = slices.Clone(fx.sums[3])
	// Stripe 7's two blocks swapped, and their checksums.
	swapped := append(bytes.Clone(fx.par[7][512:]), fx.par[7][:512]...)
	if _, err := fx.dev.WriteAt(swapped, l.ParityOffset(7, 0)); err != nil {
		t.Fatal(err)
	}
	fx.sums[7] = []uint32{fx.sums[7][1], fx.sums[7][0]}
	want := map[int64][]bool{1: {false, true}, 5: {true, true}, 7: {true, true}}
	for s := range l.Stripes() {
		_, errs, bad := fx.read(t, s)
		w := want[s]
		if w == nil {
			w = []bool{false, false}
		}
		n := 0
		for j, e := range errs {
			if (e != nil) != w[j] {
				t.Fatalf("stripe %d block %d: %v", s, j, e)
			}
			if e == nil {
				continue
			}
			n++
			var be *BlockError
			if !errors.As(e, &be) || !errors.Is(e, ErrDamaged) || !errors.Is(e, ErrChecksum) || be.Stripe != s || be.Index != j || be.Expected != fx.sums[s][j] || be.Actual == be.Expected || be.Off != l.ParityOffset(s, j) {
				t.Fatalf("stripe %d block %d: %#v", s, j, e)
			}
		}
		if n != bad {
			t.Fatalf("stripe %d: %d bad, %d errors", s, bad, n)
		}
	}
}

// TestFileReadErrors: an unreadable parity block is an erasure of its own
// (the stripe is read again block by block); a closed device fails Read.
func TestFileReadErrors(t *testing.T) {
	fx := newParityFixture(t, Options{Data: 8, Parity: 3, BlockSize: 512, Blocks: 64}, 3)
	l := fx.l
	if _, err := fx.dev.Inject(faultdev.Fault{Kind: faultdev.FailRead, Off: l.ParityOffset(2, 1), Len: 512}); err != nil {
		t.Fatal(err)
	}
	buf, errs, bad := fx.read(t, 2)
	if bad != 1 || errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], ErrDamaged) || !errors.Is(errs[1], syscall.EIO) {
		t.Fatalf("%d bad: %v", bad, errs)
	}
	if !bytes.Equal(buf[:512], fx.par[2][:512]) || !bytes.Equal(buf[1024:], fx.par[2][1024:]) {
		t.Fatal("the readable blocks were not read")
	}
	fx.dev.ClearFaults()
	if err := fx.dev.Close(); err != nil {
		t.Fatal(err)
	}
	errs = make([]error, 3)
	if _, err := fx.f.Read(0, buf, fx.sums[0], errs); !errors.Is(err, device.ErrClosed) {
		t.Fatalf("Read on a closed device: %v", err)
	}
	if err := fx.f.Write(0, buf, make([]uint32, 3)); !errors.Is(err, device.ErrClosed) {
		t.Fatalf("Write on a closed device: %v", err)
	}
}

func TestNewFileRefuses(t *testing.T) {
	l := mustLayout(t, Options{Data: 4, Parity: 2, BlockSize: 512, Blocks: 40})
	small, _ := device.NewMem(l.ParitySize()-512, 512)
	if _, err := NewFile(small, l); err == nil {
		t.Error("a parity device too small")
	}
	big, _ := device.NewMem(1<<20, 4096)
	if _, err := NewFile(big, l); err == nil {
		t.Error("a parity device of 4096-byte blocks for 512-byte parity blocks")
	}
	if _, err := NewFile(big, Layout{}); !errors.Is(err, ErrInvalidLayout) {
		t.Error("the zero Layout")
	}
	ok, _ := device.NewMem(l.ParitySize(), 512)
	f, err := NewFile(ok, l)
	if err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"short buf":  f.Write(0, make([]byte, 512), make([]uint32, 2)),
		"few sums":   f.Write(0, make([]byte, 1024), make([]uint32, 1)),
		"stripe -1":  f.Write(-1, make([]byte, 1024), make([]uint32, 2)),
		"stripe S":   f.Write(l.Stripes(), make([]byte, 1024), make([]uint32, 2)),
		"read errs":  func() error { _, err := f.Read(0, make([]byte, 1024), make([]uint32, 2), nil); return err }(),
		"read short": func() error { _, err := f.Read(0, make([]byte, 1000), make([]uint32, 2), make([]error, 2)); return err }(),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
