package dif

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

func TestInsertStripConvert(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 200 {
		f := randFormat(rng)
		p := randParams(rng, f)
		p.Skip = 0
		n := rng.IntN(20)
		if rng.IntN(10) == 0 {
			n = chunk + rng.IntN(3)
		}
		if f.BlockSize() > 1024 {
			n = min(n, 10)
		}
		src := make([]byte, n*f.BlockSize())
		fill(rng, src)
		data, md := newRun(rng, f, n) // random garbage to be overwritten

		if err := f.Insert(data, md, src, p); err != nil {
			t.Fatalf("%v: Insert: %v", f, err)
		}
		// Insert = copy, zero metadata, Generate.
		wantD, wantM := newRun(rng, f, n)
		for i := range n {
			d, m := oracleBlock(f, wantD, wantM, i)
			copy(d, src[i*f.BlockSize():])
			clear(m)
		}
		oracleGenerate(f, wantD, wantM, p, n)
		if !bytes.Equal(data, wantD) || !bytes.Equal(md, wantM) {
			t.Fatalf("%v: Insert differs from the oracle", f)
		}
		if err := f.Verify(data, md, p); err != nil {
			t.Fatalf("%v: Verify after Insert: %v", f, err)
		}

		// Strip gives the source back.
		out := make([]byte, len(src))
		if err := f.Strip(out, data, md, p); err != nil || !bytes.Equal(out, src) {
			t.Fatalf("%v: Strip: %v", f, err)
		}

		// Convert to the other layout and back; the PI still verifies there.
		var ext, sd, sm []byte
		if f.Layout() == Interleaved {
			ext = data
			sd, sm = make([]byte, n*f.BlockSize()), make([]byte, n*f.MetadataSize())
			if err := f.ToSeparate(sd, sm, ext); err != nil {
				t.Fatal(err)
			}
		} else {
			sd, sm = data, md
			ext = make([]byte, n*f.ExtendedBlockSize())
			if err := f.ToInterleaved(ext, sd, sm); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.WithLayout(Interleaved).Verify(ext, nil, p); err != nil {
			t.Fatalf("%v: interleaved copy: %v", f, err)
		}
		if err := f.WithLayout(Separate).Verify(sd, sm, p); err != nil {
			t.Fatalf("%v: separate copy: %v", f, err)
		}
		back := make([]byte, len(ext))
		if err := f.ToInterleaved(back, sd, sm); err != nil || !bytes.Equal(back, ext) {
			t.Fatalf("%v: round trip: %v", f, err)
		}

		if n == 0 || f.Type() == Type0 {
			continue
		}
		// Strip refuses damaged data and leaves dst alone.
		b := rng.IntN(n)
		if err := f.Inject(data, md, b, FieldData, rng.IntN(8*f.BlockSize())); err != nil {
			t.Fatal(err)
		}
		clear(out)
		err := f.Strip(out, data, md, p)
		if states, _ := oracleVerify(f, data, md, p, n); states[b] == StateFailed && !errors.Is(err, ErrGuard) {
			t.Fatalf("%v: Strip of a damaged run: %v", f, err)
		}
		if err != nil && !bytes.Equal(out, make([]byte, len(out))) {
			t.Fatalf("%v: Strip wrote to dst on failure", f)
		}
	}
}

func TestRemap(t *testing.T) {
	for _, s := range []string{"512+8", "512+8:sts=8:dix", "512+16:crc32:pi-first", "512+32:crc64:type2:dix", "512+16:crc32"} {
		f := MustFormat(s)
		n := 100
		data, md := oneBlock(f)
		data, md = bytes.Repeat(data, n), bytes.Repeat(md, n)
		old := Params{RefTag: 1000, AppTag: 5, AppMask: 0xFFFF}
		if f.StorageTagBits() > 0 {
			old.StorageTag = 0x42
		}
		if err := f.Generate(data, md, old); err != nil {
			t.Fatal(err)
		}
		// Block 7 is unwritten, block 9 escaped: both keep their tags.
		un := f.UnwrittenTuple()
		if err := f.WriteTuple(data, md, 7, un); err != nil {
			t.Fatal(err)
		}
		esc, _ := f.ReadTuple(data, md, 9)
		esc.AppTag = 0xFFFF
		f.WriteTuple(data, md, 9, esc)
		before := append(clone(data), md...)

		newp := old
		newp.RefTag = 5_000_000
		if err := f.Remap(data, md, old, newp.RefTag); err != nil {
			t.Fatalf("%v: Remap: %v", f, err)
		}
		if err := f.Verify(data, md, newp); err != nil {
			t.Fatalf("%v: Verify after Remap: %v", f, err)
		}
		if err := f.Verify(data, md, old); !errors.Is(err, ErrRefTag) {
			t.Fatalf("%v: old tags still verify: %v", f, err)
		}
		if tu, _ := f.ReadTuple(data, md, 7); !tu.Unwritten(f) {
			t.Fatalf("%v: unwritten block changed: %+v", f, tu)
		}
		if tu, _ := f.ReadTuple(data, md, 9); tu != esc {
			t.Fatalf("%v: escaped block changed: %+v", f, tu)
		}
		// Only ref tags changed.
		after := append(clone(data), md...)
		for i := range after {
			if after[i] != before[i] {
				blk, off := i/f.ExtendedBlockSize(), i%f.ExtendedBlockSize()
				if f.Layout() == Separate {
					if i < len(data) {
						t.Fatalf("%v: data byte %d changed", f, i)
					}
					j := i - len(data)
					blk, off = j/f.MetadataSize(), f.BlockSize()+j%f.MetadataSize()
				}
				refStart := f.BlockSize() + f.PIOffset() + f.Guard().Bits()/8 + 2
				if off < refStart || off >= f.BlockSize()+f.PIOffset()+f.TupleSize() {
					t.Fatalf("%v: block %d byte %d changed outside the ref tag", f, blk, off)
				}
			}
		}
		// A damaged run is refused and left alone.
		f.Inject(data, md, 50, FieldData, 1)
		snap := append(clone(data), md...)
		err := f.Remap(data, md, newp, 1)
		var ve *VerifyError
		if !errors.As(err, &ve) || ve.Errors[0].Block != 50 {
			t.Fatalf("%v: Remap of a damaged run: %v", f, err)
		}
		if !bytes.Equal(snap, append(clone(data), md...)) {
			t.Fatalf("%v: Remap changed a damaged run", f)
		}
	}
	// Type 3: nothing to remap; Remap verifies only.
	f := MustFormat("512+8:type3")
	data := make([]byte, 4*520)
	f.Generate(data, nil, Params{RefTag: 3})
	snap := clone(data)
	if err := f.Remap(data, nil, Params{}, 77); err != nil || !bytes.Equal(snap, data) {
		t.Fatalf("type 3 remap: %v", err)
	}
}

func TestInjectEveryBit(t *testing.T) {
	// Every bit of every tuple field, at every guard width: exactly one
	// failure, on the right field, or an escape where the flip makes one.
	for _, s := range []string{"512+8:sts=8", "512+16:crc32:sts=20:pi-first", "512+16:crc32", "512+24:crc64:sts=12:dix"} {
		f := MustFormat(s)
		p := Params{RefTag: 12345, AppTag: 0x7FFF, AppMask: 0xFFFF}
		if f.StorageTagBits() > 0 {
			p.StorageTag = 3
		}
		fields := []Field{FieldGuard, FieldAppTag, FieldRefTag, FieldStorageTag}
		widths := []int{f.Guard().Bits(), 16, f.RefTagBits(), f.StorageTagBits()}
		for k, field := range fields {
			for bit := range widths[k] {
				data, md := oneBlock(f)
				if err := f.Generate(data, md, p); err != nil {
					t.Fatal(err)
				}
				if err := f.Inject(data, md, 0, field, bit); err != nil {
					t.Fatal(err)
				}
				wantState := StateFailed
				if field == FieldAppTag && bit == 15 {
					wantState = StateEscaped // 0x7FFF -> 0xFFFF
				}
				var fs []Field
				if wantState == StateFailed {
					fs = []Field{field}
				}
				checkOne(t, f, data, md, p, wantState, fs)
			}
		}
	}
}
