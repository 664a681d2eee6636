package dif

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fuzzFormat derives a valid format from fuzz input.
func fuzzFormat(opts uint64) Format {
	g := Guard(opts % 3)
	ts := g.TupleSize()
	o := Options{
		BlockSize:      512 << (opts >> 2 % 2),
		MetadataSize:   ts + int(opts>>3%33),
		Guard:          g,
		Type:           Type(opts >> 9 % 4),
		Position:       Position(opts >> 11 % 2),
		StorageTagBits: int(opts>>12%128) % (g.SpaceBits() + 1),
		Layout:         Layout(opts >> 19 % 2),
	}
	f, err := NewFormat(o)
	if err != nil {
		panic(err)
	}
	return f
}

// fitParams masks fuzz values into what f accepts.
func fitParams(f Format, ref, stor uint64, app uint16) Params {
	if r := f.RefTagBits(); r < 64 {
		ref &= 1<<uint(r) - 1
	}
	if s := f.StorageTagBits(); s < 64 {
		stor &= 1<<uint(s) - 1
	}
	return Params{RefTag: ref, StorageTag: stor, AppTag: app, AppMask: 0xFFFF, LBA: int64((ref ^ stor) >> 1)}
}

// expectedFlip returns the field a flip of bit `bit` of block b's extended
// block (data then metadata, bit k in byte k/8 at value 1<<(k%8)) must be
// reported on, from the tables alone, or 0 if the bit is not checked.
func expectedFlip(f Format, bit int) Field {
	byteOff, inByte := bit/8, bit%8
	bs := f.BlockSize()
	if byteOff < bs {
		return FieldGuard
	}
	m := byteOff - bs // offset in the metadata
	ts := f.TupleSize()
	pi := 0
	if f.Position() == PILast {
		pi = f.MetadataSize() - ts
	}
	if m < pi {
		return FieldGuard // metadata before the tuple: covered
	}
	if m >= pi+ts {
		return 0 // metadata after the tuple (PI first): not covered
	}
	o := m - pi
	gb := f.Guard().Bits() / 8
	switch {
	case o < gb:
		return FieldGuard
	case o < gb+2:
		return FieldAppTag
	}
	k := (ts-1-o)*8 + inByte // bit of the tag space
	if k < f.RefTagBits() {
		if f.Type() == Type3 {
			return 0
		}
		return FieldRefTag
	}
	return FieldStorageTag
}

// FuzzRoundTrip: for any valid format, parameters and data, Verify(Generate)
// passes, and a single-bit flip anywhere in a block is reported exactly as
// the oracle and the tables say: at that block, on the right field, unless
// the flip made the block an escape or the bit is not checked.
func FuzzRoundTrip(f *testing.F) {
	f.Add(uint64(0), uint64(1000), uint64(0), uint16(0), uint8(3), uint64(1), uint32(0))
	f.Add(uint64(1|1<<9|40<<12), ^uint64(0), uint64(5), uint16(0xFFFE), uint8(70), uint64(2), uint32(99999))
	f.Add(uint64(2|3<<9|1<<11|1<<19), uint64(1<<48-2), ^uint64(0), uint16(0xFFFF), uint8(1), uint64(3), uint32(4100))
	f.Add(uint64(1|8<<3|1<<11|1<<19), uint64(1<<40), uint64(0), uint16(0x7FFF), uint8(2), uint64(4), uint32(8*512+8*8+7))
	f.Fuzz(func(t *testing.T, opts, ref, stor uint64, app uint16, nb uint8, seed uint64, target uint32) {
		fm := fuzzFormat(opts)
		p := fitParams(fm, ref, stor, app)
		n := int(nb%130) + 1
		rng := rand.New(rand.NewPCG(seed, 0))
		data, md := newRun(rng, fm, n)
		if err := fm.Generate(data, md, p); err != nil {
			t.Fatalf("%v %+v: Generate: %v", fm, p, err)
		}
		if err := fm.Verify(data, md, p); err != nil {
			t.Fatalf("%v %+v: Verify after Generate: %v", fm, p, err)
		}
		ostates, _ := oracleVerify(fm, data, md, p, n)

		// Flip one bit of one block.
		ext := fm.ExtendedBlockSize()
		blk := int(target) / (8 * ext) % n
		bit := int(target) % (8 * ext)
		d, m := oracleBlock(fm, data, md, blk)
		if bit < 8*fm.BlockSize() {
			d[bit/8] ^= 1 << (bit % 8)
		} else {
			k := bit - 8*fm.BlockSize()
			m[k/8] ^= 1 << (k % 8)
		}
		wantStates, wantErrs := oracleVerify(fm, data, md, p, n)
		var got []CheckError
		if _, err := fm.VerifyFunc(data, md, p, func(ce *CheckError) error {
			got = append(got, *ce)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wantErrs, got); diff != "" {
			t.Fatalf("%v %+v block %d bit %d: (-oracle +fast)\n%s", fm, p, blk, bit, diff)
		}
		// Classify of a copy: the oracle's states and sums, and the copy.
		states, sums, dst := make([]State, n), make([]uint32, n), make([]byte, len(data))
		if _, err := fm.Classify(&Classification{States: states, Sums: sums, Src: data}, dst, md, p); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wantStates, states); diff != "" || !bytes.Equal(dst, data) {
			t.Fatalf("%v %+v block %d bit %d: Classify: states (-oracle +fast)\n%s (copy equal %v)", fm, p, blk, bit, diff, bytes.Equal(dst, data))
		}
		if diff := cmp.Diff(oracleSums(fm, data, md, n), sums); diff != "" {
			t.Fatalf("%v block %d bit %d: Classify: sums (-oracle +fast)\n%s", fm, blk, bit, diff)
		}
		// The property from the tables alone.
		field := expectedFlip(fm, bit)
		switch {
		case fm.Type() == Type0 || ostates[blk] != StateOK:
			// No PI, or the block was escaped/unwritten before the flip: the
			// oracle comparison above is the whole check.
		case wantStates[blk] == StateEscaped || wantStates[blk] == StateUnwritten:
			if len(got) != 0 {
				t.Fatalf("%v: flip made an escape but was reported: %v", fm, got)
			}
		case field == 0:
			if len(got) != 0 {
				t.Fatalf("%v: unchecked bit %d reported: %v", fm, bit, got)
			}
		default:
			if len(got) != 1 || got[0].Block != blk || got[0].Field != field || got[0].LBA != p.LBA+int64(blk) {
				t.Fatalf("%v %+v: flip of block %d bit %d: want one %v failure, got %+v", fm, p, blk, bit, field, got)
			}
		}
	})
}

// FuzzMalformed: any options, parameters and buffer sizes give an error or
// succeed; nothing panics, and buffers that do not hold whole blocks are
// refused.
func FuzzMalformed(f *testing.F) {
	f.Add(512, 8, uint8(0), uint8(1), uint8(0), 0, uint8(0), 520, 0, 512, uint64(0), uint64(0), 0, 0)
	f.Add(4096, 16, uint8(2), uint8(3), uint8(1), 47, uint8(1), 4096, 15, 100, ^uint64(0), uint64(1), 3, -1)
	f.Add(0, -1, uint8(9), uint8(9), uint8(9), -5, uint8(9), -1, -1, -1, uint64(0), uint64(0), -1, math.MaxInt)
	f.Fuzz(func(t *testing.T, bs, ms int, g, typ, pos uint8, sts int, layout uint8, dlen, mlen, slen int, ref, stor uint64, block, bit int) {
		fm, err := NewFormat(Options{BlockSize: bs, MetadataSize: ms, Guard: Guard(g), Type: Type(typ), Position: Position(pos), StorageTagBits: sts, Layout: Layout(layout)})
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("NewFormat error %T %v", err, err)
			}
			fm = Format{} // the zero Format must fail cleanly too
		}
		clamp := func(n int) int { return min(max(n, 0), 1<<18) }
		data, md, src := make([]byte, clamp(dlen)), make([]byte, clamp(mlen)), make([]byte, clamp(slen))
		p := Params{RefTag: ref, StorageTag: stor}
		n, berr := fm.Blocks(data, md)
		errs := []error{
			fm.Generate(data, md, p),
			fm.Verify(data, md, p),
			fm.Insert(data, md, src, p),
			fm.Strip(src, data, md, p),
			fm.ToSeparate(src, md, data),
			fm.ToInterleaved(data, src, md),
			fm.Remap(data, md, p, ref+1),
			fm.Inject(data, md, block, Field(bit&7), bit),
			fm.WriteTuple(data, md, block, Tuple{}),
		}
		_, e := fm.VerifyFunc(data, md, p, func(*CheckError) error { return nil })
		errs = append(errs, e)
		_, e = fm.ReadTuple(data, md, block)
		errs = append(errs, e)
		_, e = fm.Classify(&Classification{States: make([]State, n)}, data, md, p)
		errs = append(errs, e)
		// With sums, and with a source of any size (copied to data only
		// when it fits).
		_, e = fm.Classify(&Classification{States: make([]State, n), Sums: make([]uint32, n)}, data, md, p)
		errs = append(errs, e)
		_, e = fm.Classify(&Classification{States: make([]State, n), Sums: make([]uint32, n), Src: src}, data, md, p)
		errs = append(errs, e)
		if berr != nil || !fm.Valid() {
			for i, e := range errs[:4] {
				if e == nil {
					t.Fatalf("%v: operation %d accepted bad buffers %d/%d", fm, i, len(data), len(md))
				}
			}
		}
		for _, e := range errs {
			if e != nil && !(errors.Is(e, ErrBuffer) || errors.Is(e, ErrParams) || errors.Is(e, ErrIntegrity) || isFormatError(e)) {
				t.Fatalf("unclassified error %T: %v", e, e)
			}
		}
	})
}

func isFormatError(err error) bool {
	var fe *FormatError
	return errors.As(err, &fe)
}

// FuzzParse: Parse never panics, and what it accepts prints canonically
// and parses back to the same format.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"512+8", "4096+16:crc64:type1:pi-last", "4096+64:crc32:type3:pi-first:sts=16:dix", "512+8:sts=33", "x", "512+8::", "65536+65535:crc32:sts=80:type0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fm, err := Parse(s)
		if err != nil {
			if !isFormatError(err) {
				t.Fatalf("Parse(%q): %T %v", s, err, err)
			}
			return
		}
		c := fm.String()
		g, err := Parse(c)
		if err != nil || g != fm || g.String() != c {
			t.Fatalf("Parse(%q) = %v; Parse(%q) = %v, %v", s, fm, c, g, err)
		}
		if b, _ := fm.MarshalText(); !bytes.Equal(b, []byte(c)) {
			t.Fatalf("MarshalText %q", b)
		}
	})
}
