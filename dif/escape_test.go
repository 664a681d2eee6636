package dif

import (
	"errors"
	"fmt"
	"testing"
)

// TestEscapesAndFields runs every escape rule and every field, at every
// guard width, PI position, PI type and with and without a storage tag, on
// a one-block run built by Generate and then edited, under every
// implementation of kernels/piscan.
func TestEscapesAndFields(t *testing.T) {
	forEachScan(t, testEscapesAndFields)
}

func testEscapesAndFields(t *testing.T) {
	type want struct {
		state  State
		fields []Field
	}
	type tcase struct {
		name string
		edit func(f Format, data, md []byte)
		want func(f Format) want
	}
	setTuple := func(f Format, data, md []byte, edit func(*Tuple)) {
		tu, err := f.ReadTuple(data, md, 0)
		if err != nil {
			panic(err)
		}
		edit(&tu)
		if err := f.WriteTuple(data, md, 0, tu); err != nil {
			panic(err)
		}
	}
	allOnes := func(f Format, tu *Tuple) {
		tu.RefTag, tu.RefTagHigh, tu.StorageTag, tu.StorageTagHigh = ^uint64(0), 0xFFFF, ^uint64(0), 0xFFFF
	}
	typ12 := func(f Format) bool { return f.Type() == Type1 || f.Type() == Type2 }
	ok := want{state: StateOK}
	failed := func(fs ...Field) want { return want{StateFailed, fs} }
	cases := []tcase{
		{"clean", func(Format, []byte, []byte) {}, func(Format) want { return ok }},
		{"guard", func(f Format, d, m []byte) { f.Inject(d, m, 0, FieldGuard, 0) },
			func(Format) want { return failed(FieldGuard) }},
		{"guard-top-bit", func(f Format, d, m []byte) { f.Inject(d, m, 0, FieldGuard, f.Guard().Bits()-1) },
			func(Format) want { return failed(FieldGuard) }},
		{"data", func(f Format, d, m []byte) { f.Inject(d, m, 0, FieldData, 8*f.BlockSize()-1) },
			func(Format) want { return failed(FieldGuard) }},
		{"metadata", func(f Format, d, m []byte) { f.Inject(d, m, 0, FieldMetadata, 3) },
			func(f Format) want {
				if f.Position() == PILast {
					return failed(FieldGuard) // covered by the guard
				}
				return ok
			}},
		{"app", func(f Format, d, m []byte) { f.Inject(d, m, 0, FieldAppTag, 15) },
			func(Format) want { return failed(FieldAppTag) }},
		{"ref", func(f Format, d, m []byte) { f.Inject(d, m, 0, FieldRefTag, f.RefTagBits()-1) },
			func(f Format) want {
				if typ12(f) {
					return failed(FieldRefTag)
				}
				return ok // Type 3: not checked
			}},
		{"storage", func(f Format, d, m []byte) {
			if f.StorageTagBits() > 0 {
				f.Inject(d, m, 0, FieldStorageTag, f.StorageTagBits()-1)
			}
		}, func(f Format) want {
			if f.StorageTagBits() > 0 {
				return failed(FieldStorageTag)
			}
			return ok
		}},
		{"everything", func(f Format, d, m []byte) {
			setTuple(f, d, m, func(tu *Tuple) { tu.Guard ^= 1; tu.AppTag ^= 1; tu.RefTag ^= 1; tu.StorageTag ^= 1 })
		}, func(f Format) want {
			fs := []Field{FieldGuard, FieldAppTag}
			if typ12(f) {
				fs = append(fs, FieldRefTag)
			}
			if f.StorageTagBits() > 0 {
				fs = append(fs, FieldStorageTag)
			}
			return failed(fs...)
		}},
		{"app-escape", func(f Format, d, m []byte) {
			setTuple(f, d, m, func(tu *Tuple) { tu.AppTag = 0xFFFF; tu.Guard ^= 1; tu.RefTag ^= 1 })
		}, func(f Format) want {
			if typ12(f) {
				return want{state: StateEscaped}
			}
			return failed(FieldGuard, FieldAppTag) // Type 3 needs the ref tag all ones too
		}},
		{"unwritten", func(f Format, d, m []byte) {
			setTuple(f, d, m, func(tu *Tuple) { tu.AppTag = 0xFFFF; allOnes(f, tu); tu.Guard ^= 1 })
		}, func(Format) want { return want{state: StateUnwritten} }},
		{"unwritten-pattern", func(f Format, d, m []byte) {
			// Byte for byte: every tuple byte after the guard is 0xFF.
			tb := tupleBytes(f, d, m)
			for i := f.Guard().Bits() / 8; i < len(tb); i++ {
				tb[i] = 0xFF
			}
		}, func(Format) want { return want{state: StateUnwritten} }},
		{"almost-unwritten", func(f Format, d, m []byte) {
			setTuple(f, d, m, func(tu *Tuple) { tu.AppTag = 0xFFFF; allOnes(f, tu) })
			f.Inject(d, m, 0, FieldRefTag, 0)
		}, func(f Format) want {
			if typ12(f) {
				return want{state: StateEscaped}
			}
			fs := []Field{FieldAppTag} // Type 3: not an escape, so checked
			if f.StorageTagBits() > 0 {
				fs = append(fs, FieldStorageTag)
			}
			return failed(fs...)
		}},
		{"almost-unwritten-top-bit", func(f Format, d, m []byte) {
			// Clear the top bit of the whole tag space.
			setTuple(f, d, m, func(tu *Tuple) { tu.AppTag = 0xFFFF; allOnes(f, tu) })
			if f.StorageTagBits() > 0 {
				f.Inject(d, m, 0, FieldStorageTag, f.StorageTagBits()-1)
			} else {
				f.Inject(d, m, 0, FieldRefTag, f.RefTagBits()-1)
			}
		}, func(f Format) want {
			if typ12(f) {
				return want{state: StateEscaped}
			}
			fs := []Field{FieldAppTag}
			if f.StorageTagBits() > 0 {
				fs = append(fs, FieldStorageTag)
			}
			return failed(fs...)
		}},
		{"ref-all-ones", func(f Format, d, m []byte) {
			setTuple(f, d, m, func(tu *Tuple) { allOnes(f, tu) })
		}, func(f Format) want {
			var fs []Field
			if typ12(f) {
				fs = append(fs, FieldRefTag)
			}
			if f.StorageTagBits() > 0 {
				fs = append(fs, FieldStorageTag)
			}
			if fs == nil {
				return ok
			}
			return failed(fs...)
		}},
	}
	for _, g := range []Guard{Guard16, Guard32, Guard64} {
		for _, pos := range []Position{PILast, PIFirst} {
			for _, typ := range []Type{Type1, Type2, Type3} {
				for _, sts := range []int{0, 8, g.SpaceBits() / 2, g.SpaceBits() - 1} {
					for _, l := range []Layout{Interleaved, Separate} {
						f, err := NewFormat(Options{BlockSize: 512, MetadataSize: g.TupleSize() + 8, Guard: g, Type: typ, Position: pos, StorageTagBits: sts, Layout: l})
						if err != nil {
							t.Fatal(err)
						}
						for _, c := range cases {
							t.Run(fmt.Sprintf("format=%v/case=%s", f, c.name), func(t *testing.T) {
								data, md := oneBlock(f)
								p := Params{RefTag: refMax(f) / 3, StorageTag: 1 % (1 << min(sts, 63)), AppTag: 0x1234, AppMask: 0xFFFF, LBA: 99}
								if err := f.Generate(data, md, p); err != nil {
									t.Fatal(err)
								}
								c.edit(f, data, md)
								w := c.want(f)
								checkOne(t, f, data, md, p, w.state, w.fields)
							})
						}
					}
				}
			}
		}
	}
}

// refMax returns the largest ref tag Params accepts for f.
func refMax(f Format) uint64 {
	if r := f.RefTagBits(); r < 64 {
		return 1<<uint(r) - 1
	}
	return ^uint64(0)
}

// tupleBytes returns the tuple of the first block of a run.
func tupleBytes(f Format, data, md []byte) []byte {
	_, m := oracleBlock(f, data, md, 0)
	return oracleTupleAt(f, m)
}

func oneBlock(f Format) (data, md []byte) {
	if f.Layout() == Interleaved {
		data = make([]byte, f.ExtendedBlockSize())
	} else {
		data, md = make([]byte, f.BlockSize()), make([]byte, f.MetadataSize())
	}
	for i := range data {
		data[i] = byte(i * 13)
	}
	return data, md
}

func checkOne(t *testing.T, f Format, data, md []byte, p Params, state State, fields []Field) {
	t.Helper()
	var states [1]State
	if _, err := f.Classify(&Classification{States: states[:]}, data, md, p); err != nil {
		t.Fatal(err)
	}
	if states[0] != state {
		t.Errorf("state %v, want %v", states[0], state)
	}
	var got []Field
	if _, err := f.VerifyFunc(data, md, p, func(ce *CheckError) error {
		got = append(got, ce.Field)
		if ce.Block != 0 || ce.LBA != p.LBA {
			t.Errorf("block %d LBA %d", ce.Block, ce.LBA)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(fields) {
		t.Errorf("failed fields %v, want %v", got, fields)
	}
	err := f.Verify(data, md, p)
	if (err != nil) != (len(fields) > 0) {
		t.Errorf("Verify: %v", err)
	}
	for _, fl := range fields {
		if !errors.Is(err, fl.sentinel()) || !errors.Is(err, ErrIntegrity) {
			t.Errorf("errors.Is(%v, %v) = false", err, fl.sentinel())
		}
	}
	// The oracle agrees.
	ostates, oerrs := oracleVerify(f, data, md, p, 1)
	if ostates[0] != state || len(oerrs) != len(fields) {
		t.Errorf("oracle: state %v, %d failures", ostates[0], len(oerrs))
	}
}

// TestWideRefTags checks the ref tag arithmetic where it wraps and, with
// the 80-bit space of the 32b guard, where it carries into bit 64.
func TestWideRefTags(t *testing.T) {
	for _, c := range []struct {
		format string
		ref    uint64
	}{
		{"512+8", 0xFFFFFFFF - 70},
		{"512+8:sts=16", 0xFFFF - 3},
		{"512+16:crc64", 1<<48 - 65},
		{"512+16:crc64:sts=47", 0},
		{"512+16:crc32", ^uint64(0) - 100},       // 80-bit ref tag: carry into bit 64
		{"512+16:crc32:sts=16", ^uint64(0) - 5},  // 64-bit ref tag: wraps mod 2^64
		{"512+16:crc32:sts=10", ^uint64(0) - 65}, // 70-bit ref tag
		{"512+16:crc32:sts=40", 1<<40 - 3},
	} {
		for _, l := range []string{"", ":dix"} {
			f := MustFormat(c.format + l)
			n := 3 * chunk
			data, md := oneBlock(f)
			data, md = make([]byte, n*len(data)), make([]byte, n*len(md))
			p := Params{RefTag: c.ref, StorageTag: 1, AppMask: 0xFFFF, AppTag: 7}
			if f.StorageTagBits() == 0 {
				p.StorageTag = 0
			}
			if err := f.Generate(data, md, p); err != nil {
				t.Fatal(err)
			}
			wantD, wantM := make([]byte, len(data)), make([]byte, len(md))
			oracleGenerate(f, wantD, wantM, p, n)
			if string(wantD) != string(data) || string(wantM) != string(md) {
				t.Fatalf("%v ref %#x: Generate differs from the oracle", f, c.ref)
			}
			if err := f.Verify(data, md, p); err != nil {
				t.Fatalf("%v: %v", f, err)
			}
			// A carried ref tag that lost its carry is reported with the
			// high bits.
			if f.RefTagBits() > 64 {
				tu, _ := f.ReadTuple(data, md, n-1)
				if tu.RefTagHigh != 1 {
					t.Fatalf("%v: no carry into bit 64: %+v", f, tu)
				}
				f.Inject(data, md, n-1, FieldRefTag, 64)
				var ce *CheckError
				if err := f.Verify(data, md, p); !errors.As(err, &ce) || ce.ExpectedHigh != 1 || ce.ActualHigh != 0 || ce.Block != n-1 {
					t.Fatalf("%v: %v", f, err)
				}
			}
		}
	}
}
