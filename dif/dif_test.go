package dif

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// randFormat returns a random valid format, biased towards the edges.
func randFormat(rng *rand.Rand) Format {
	g := Guard(rng.IntN(3))
	ts := g.TupleSize()
	md := ts
	switch rng.IntN(4) {
	case 1:
		md = ts + 1 + rng.IntN(8)
	case 2:
		md = ts + rng.IntN(64)
	case 3:
		md = 64
	}
	bs := 512
	if rng.IntN(4) == 0 {
		bs = 512 << rng.IntN(4)
	}
	sts := 0
	switch rng.IntN(3) {
	case 1:
		sts = rng.IntN(g.SpaceBits() + 1)
	case 2:
		sts = []int{0, 16, 32, 48, 64, 80}[rng.IntN(6)]
		sts = min(sts, g.SpaceBits())
	}
	typ := Type(1 + rng.IntN(3))
	if rng.IntN(10) == 0 {
		typ = Type0
	}
	f, err := NewFormat(Options{
		BlockSize: bs, MetadataSize: md, Guard: g, Type: typ,
		Position: Position(rng.IntN(2)), StorageTagBits: sts, Layout: Layout(rng.IntN(2)),
	})
	if err != nil {
		panic(err)
	}
	return f
}

// randBits returns a random value of at most n bits (n may exceed 64),
// biased towards all ones and values near the wrap.
func randBits(rng *rand.Rand, n int) uint64 {
	if n <= 0 {
		return 0
	}
	m := ^uint64(0)
	if n < 64 {
		m = 1<<uint(n) - 1
	}
	switch rng.IntN(4) {
	case 0:
		return m
	case 1:
		return m - uint64(rng.IntN(8))&m
	case 2:
		return uint64(rng.IntN(100)) & m
	}
	return rng.Uint64() & m
}

func randParams(rng *rand.Rand, f Format) Params {
	p := Params{
		RefTag:     randBits(rng, f.RefTagBits()),
		StorageTag: randBits(rng, f.StorageTagBits()),
		AppTag:     uint16(rng.Uint32()),
		LBA:        int64(rng.Uint64() >> uint(1+rng.IntN(63))),
	}
	switch rng.IntN(4) {
	case 0:
		p.AppTag = 0xFFFF // every block escaped (Types 1 and 2)
	case 1:
		p.AppTag = 0
	}
	switch rng.IntN(3) {
	case 0:
		p.AppMask = 0xFFFF
	case 1:
		p.AppMask = uint16(rng.Uint32())
	}
	if rng.IntN(4) == 0 {
		p.Skip = Check(rng.IntN(16))
	}
	return p
}

// newRun allocates random buffers for n blocks in f's layout.
func newRun(rng *rand.Rand, f Format, n int) (data, md []byte) {
	if f.Layout() == Interleaved {
		data = make([]byte, n*f.ExtendedBlockSize())
	} else {
		data = make([]byte, n*f.BlockSize())
		md = make([]byte, n*f.MetadataSize())
	}
	fill(rng, data)
	fill(rng, md)
	return data, md
}

func fill(rng *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

// collect runs VerifyFunc and returns its failures as values.
func collect(t *testing.T, f Format, data, md []byte, p Params) ([]CheckError, Summary) {
	t.Helper()
	var got []CheckError
	sum, err := f.VerifyFunc(data, md, p, func(ce *CheckError) error {
		got = append(got, *ce)
		return nil
	})
	if err != nil {
		t.Fatalf("%v: VerifyFunc: %v", f, err)
	}
	return got, sum
}

// corrupt damages some blocks of a run in ways that exercise every path:
// random bit flips, escapes, unwritten patterns, near-unwritten patterns.
func corrupt(rng *rand.Rand, f Format, data, md []byte, n int) {
	if n == 0 {
		return
	}
	for range rng.IntN(6) {
		i := rng.IntN(n)
		d, m := oracleBlock(f, data, md, i)
		t := oracleTupleAt(f, m)
		gb := specOf(f.Guard()).guardBytes
		switch rng.IntN(6) {
		case 0:
			d[rng.IntN(len(d))] ^= 1 << rng.IntN(8)
		case 1:
			m[rng.IntN(len(m))] ^= 1 << rng.IntN(8)
		case 2: // escape
			t[gb], t[gb+1] = 0xFF, 0xFF
		case 3: // unwritten
			for k := gb; k < len(t); k++ {
				t[k] = 0xFF
			}
		case 4: // all ones but one bit of the space
			for k := gb; k < len(t); k++ {
				t[k] = 0xFF
			}
			t[gb+2+rng.IntN(len(t)-gb-2)] ^= 1 << rng.IntN(8)
		case 5: // a random tuple
			fill(rng, t)
		}
	}
}

func TestOracleAgainstFastPath(t *testing.T) {
	forEachScan(t, testOracleAgainstFastPath)
}

func testOracleAgainstFastPath(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	iters := 1500
	if testing.Short() {
		iters = 200
	}
	for it := range iters {
		f := randFormat(rng)
		p := randParams(rng, f)
		n := rng.IntN(5)
		switch rng.IntN(10) {
		case 0:
			n = chunk - 2 + rng.IntN(5) // around the chunk boundary
		case 1, 2:
			n = rng.IntN(40)
		}
		if f.BlockSize() > 1024 {
			n = min(n, 20)
		}
		data, md := newRun(rng, f, n)
		wantD, wantM := clone(data), clone(md)
		gp := p
		gp.Skip = 0
		if err := f.Generate(data, md, gp); err != nil {
			t.Fatalf("it=%d %v %+v: Generate: %v", it, f, gp, err)
		}
		oracleGenerate(f, wantD, wantM, gp, n)
		if !bytes.Equal(data, wantD) || !bytes.Equal(md, wantM) {
			t.Fatalf("it=%d %v %+v: Generate differs from the oracle", it, f, gp)
		}
		if err := f.Verify(data, md, p); err != nil {
			t.Fatalf("it=%d %v %+v: Verify after Generate: %v", it, f, p, err)
		}
		corrupt(rng, f, data, md, n)
		wantStates, wantErrs := oracleVerify(f, data, md, p, n)
		gotErrs, sum := collect(t, f, data, md, p)
		if diff := cmp.Diff(wantErrs, gotErrs); diff != "" {
			t.Fatalf("it=%d %v %+v: failures differ from the oracle (-want +got):\n%s", it, f, p, diff)
		}
		states := make([]State, n)
		sum2, err := f.Classify(&Classification{States: states}, data, md, p)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wantStates, states); diff != "" {
			t.Fatalf("it=%d %v %+v: states differ from the oracle (-want +got):\n%s", it, f, p, diff)
		}
		// With sums and a source: the same states, the oracle's sums, a copy.
		cs, sums, dst := make([]State, n), make([]uint32, n), make([]byte, len(data))
		sum3, err := f.Classify(&Classification{States: cs, Sums: sums, Src: data}, dst, md, p)
		if err != nil || sum3 != sum2 || !slices.Equal(cs, states) || !bytes.Equal(dst, data) {
			t.Fatalf("it=%d %v %+v: Classify with sums and a source: %+v %v, in place %+v", it, f, p, sum3, err, sum2)
		}
		if diff := cmp.Diff(oracleSums(f, data, md, n), sums); diff != "" {
			t.Fatalf("it=%d %v: sums differ from the oracle (-want +got):\n%s", it, f, diff)
		}
		want := Summary{Blocks: n, Errors: len(wantErrs)}
		for _, s := range wantStates {
			switch s {
			case StateOK:
				want.OK++
			case StateEscaped:
				want.Escaped++
			case StateUnwritten:
				want.Unwritten++
			case StateFailed:
				want.Failed++
			}
		}
		if sum != want || sum2 != want {
			t.Fatalf("it=%d %v: summaries %+v and %+v, want %+v", it, f, sum, sum2, want)
		}
		err = f.Verify(data, md, p)
		if len(wantErrs) == 0 {
			if err != nil {
				t.Fatalf("it=%d: Verify: %v", it, err)
			}
			continue
		}
		var ve *VerifyError
		if !errors.As(err, &ve) || !errors.Is(err, ErrIntegrity) {
			t.Fatalf("it=%d: Verify returned %v, want a *VerifyError", it, err)
		}
		if ve.Total != len(wantErrs) || ve.Blocks != want.Failed || len(ve.Errors) != min(len(wantErrs), MaxListed) {
			t.Fatalf("it=%d: VerifyError counts %d/%d/%d", it, ve.Total, ve.Blocks, len(ve.Errors))
		}
		for k, ce := range ve.Errors {
			if *ce != wantErrs[k] {
				t.Fatalf("it=%d: listed failure %d = %+v, want %+v", it, k, *ce, wantErrs[k])
			}
		}
	}
}

// TestChunkBoundaries runs every run length around the chunk size and
// damages the first and last blocks.
func TestChunkBoundaries(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, s := range []string{"512+8", "512+16:crc32:sts=8", "512+24:crc64:pi-first:dix", "512+32:crc32:dix"} {
		f := MustFormat(s)
		for _, n := range []int{1, 2, chunk - 1, chunk, chunk + 1, 2*chunk - 1, 2 * chunk, 2*chunk + 1} {
			data, md := newRun(rng, f, n)
			p := Params{RefTag: 77, AppTag: 0x1234, AppMask: 0xFFFF, LBA: 1000}
			if err := f.Generate(data, md, p); err != nil {
				t.Fatal(err)
			}
			if err := f.Verify(data, md, p); err != nil {
				t.Fatalf("%v n=%d: %v", f, n, err)
			}
			for _, b := range []int{0, n - 1} {
				if err := f.Inject(data, md, b, FieldRefTag, 0); err != nil {
					t.Fatal(err)
				}
			}
			got, _ := collect(t, f, data, md, p)
			if n == 1 {
				if len(got) != 0 {
					t.Fatalf("%v: double flip should cancel, got %v", f, got)
				}
				continue
			}
			if len(got) != 2 || got[0].Block != 0 || got[1].Block != n-1 || got[1].LBA != 1000+int64(n-1) {
				t.Fatalf("%v n=%d: failures %+v", f, n, got)
			}
		}
	}
}

func TestAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, s := range []string{"512+8", "4096+16:crc32", "4096+16:crc64", "512+16:crc64:dix", "4096+64:crc32:type3:pi-first:sts=16:dix"} {
		f := MustFormat(s)
		data, md := newRun(rng, f, 300)
		p := Params{RefTag: 5, AppMask: 0xFFFF}
		var err error
		if a := testing.AllocsPerRun(20, func() { err = f.Generate(data, md, p) }); a != 0 || err != nil {
			t.Errorf("%v: Generate: %v allocations, err %v", f, a, err)
		}
		if a := testing.AllocsPerRun(20, func() { err = f.Verify(data, md, p) }); a != 0 || err != nil {
			t.Errorf("%v: Verify: %v allocations, err %v", f, a, err)
		}
		c := Classification{States: make([]State, 300)}
		if a := testing.AllocsPerRun(20, func() { _, err = f.Classify(&c, data, md, p) }); a != 0 || err != nil {
			t.Errorf("%v: Classify: %v allocations, err %v", f, a, err)
		}
	}
}

func TestVerifyFuncStops(t *testing.T) {
	f := MustFormat("512+8")
	data := make([]byte, 10*520)
	p := Params{RefTag: 1}
	if err := f.Generate(data, nil, p); err != nil {
		t.Fatal(err)
	}
	for _, b := range []int{2, 5, 7} {
		f.Inject(data, nil, b, FieldData, 3)
	}
	stop := errors.New("stop")
	var seen []int
	sum, err := f.VerifyFunc(data, nil, p, func(ce *CheckError) error {
		seen = append(seen, ce.Block)
		if ce.Block == 5 {
			return stop
		}
		return nil
	})
	if err != stop || fmt.Sprint(seen) != "[2 5]" {
		t.Fatalf("err %v, seen %v", err, seen)
	}
	if want := (Summary{Blocks: 6, OK: 4, Failed: 2, Errors: 2}); sum != want {
		t.Fatalf("summary %+v, want %+v", sum, want)
	}
	if _, err := f.VerifyFunc(data, nil, p, nil); !errors.Is(err, ErrParams) {
		t.Fatalf("nil visitor: %v", err)
	}
}

func TestVerifyErrorBounded(t *testing.T) {
	f := MustFormat("512+16:crc64:dix")
	n := 3 * MaxListed
	data, md := make([]byte, n*512), make([]byte, n*16)
	p := Params{RefTag: 9}
	f.Generate(data, md, p)
	for i := range n {
		f.Inject(data, md, i, FieldGuard, i%64)
		f.Inject(data, md, i, FieldRefTag, 0)
	}
	err := f.Verify(data, md, p)
	var ve *VerifyError
	if !errors.As(err, &ve) || ve.Total != 2*n || ve.Blocks != n || len(ve.Errors) != MaxListed {
		t.Fatalf("%v", err)
	}
	var ce *CheckError
	if !errors.As(err, &ce) || ce.Block != 0 || ce.Field != FieldGuard {
		t.Fatalf("errors.As: %+v", ce)
	}
	for _, target := range []error{ErrIntegrity, ErrGuard, ErrRefTag} {
		if !errors.Is(err, target) {
			t.Errorf("errors.Is(err, %v) = false", target)
		}
	}
	if errors.Is(err, ErrAppTag) {
		t.Error("errors.Is(err, ErrAppTag) = true")
	}
	want := "dif: 384 integrity failures in 192 blocks; first: block 0 (LBA 0): guard mismatch: expected "
	if got := err.Error(); len(got) < len(want) || got[:len(want)] != want {
		t.Errorf("message %q", got)
	}
}

func TestSentinels(t *testing.T) {
	for _, s := range []error{ErrGuard, ErrAppTag, ErrRefTag, ErrStorageTag} {
		if !errors.Is(s, ErrIntegrity) {
			t.Errorf("%v does not match ErrIntegrity", s)
		}
	}
	ce := &CheckError{Block: 3, LBA: 1027, Field: FieldRefTag, Expected: 0x403, Actual: 0}
	if got, want := ce.Error(), "dif: block 3 (LBA 1027): ref tag mismatch: expected 0x403, stored 0x0"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	ce = &CheckError{Field: FieldRefTag, Expected: 0, ExpectedHigh: 1, Actual: 5}
	if got, want := ce.Error(), "dif: block 0 (LBA 0): ref tag mismatch: expected 0x10000000000000000, stored 0x5"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if !errors.Is(ce, ErrRefTag) || errors.Is(ce, ErrGuard) || !errors.Is(ce, ErrIntegrity) {
		t.Error("CheckError sentinels")
	}
}
