package dif

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestParseString(t *testing.T) {
	for _, c := range []struct{ in, canon string }{
		{"512+8", "512+8"},
		{"512+8:crc16:type1:pi-last:sts=0:interleaved", "512+8"},
		{"4096+16:crc64:type1:pi-last", "4096+16:crc64"},
		{"4096+64:crc32:type3:pi-first:sts=16:dix", "4096+64:crc32:type3:pi-first:sts=16:dix"},
		{"dix:sts=16:pi-first:type3:crc32", ""}, // sizes first
		{"4096+64:dix:sts=16:pi-first:type3:crc32", "4096+64:crc32:type3:pi-first:sts=16:dix"},
		{"512+8:type0", "512+8:type0"},
		{"512+8:type2", "512+8:type2"},
		{"65536+65535:crc32:sts=80", "65536+65535:crc32:sts=80"},
		{"1024+16:crc64:sts=48", "1024+16:crc64:sts=48"},
	} {
		f, err := Parse(c.in)
		if c.canon == "" {
			if err == nil {
				t.Errorf("Parse(%q) = %v, want an error", c.in, f)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", c.in, err)
			continue
		}
		if got := f.String(); got != c.canon {
			t.Errorf("Parse(%q).String() = %q, want %q", c.in, got, c.canon)
		}
		if g, err := Parse(f.String()); err != nil || g != f {
			t.Errorf("round trip of %q: %v, %v", c.in, g, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ in, field string }{
		{"", "text"},
		{"512", "text"},
		{"+8", "block size"},
		{"512+", "metadata size"},
		{"0512+8", "block size"},
		{"500+8", "block size"},
		{"256+8", "block size"},
		{"131072+8", "block size"},
		{"512+0", "metadata size"},
		{"512+7", "metadata size"},
		{"512+8:crc32", "metadata size"},
		{"512+15:crc64", "metadata size"},
		{"512+65536", "metadata size"},
		{"512+8:type4", "text"},
		{"512+8:crc16:crc16", "guard"},
		{"512+8:sts=33", "storage tag bits"},
		{"512+16:crc64:sts=49", "storage tag bits"},
		{"512+16:crc32:sts=81", "storage tag bits"},
		{"512+8:sts=", "storage tag bits"},
		{"512+8:sts=-1", "storage tag bits"},
		{"512+8:", "text"},
		{"512+8::crc32", "text"},
		{"512+8:CRC32", "text"},
		{"512+8 ", "metadata size"},
		{"512+8:pi-first:pi-last", "position"},
		{"512+8:dix:dix", "layout"},
	} {
		_, err := Parse(c.in)
		var fe *FormatError
		if !errors.As(err, &fe) {
			t.Errorf("Parse(%q) = %v, want a *FormatError", c.in, err)
			continue
		}
		if fe.Field != c.field {
			t.Errorf("Parse(%q): field %q, want %q (%v)", c.in, fe.Field, c.field, err)
		}
		if s := err.Error(); len(s) < 5 || s[:5] != "dif: " {
			t.Errorf("message %q", s)
		}
	}
}

func TestNewFormatErrors(t *testing.T) {
	for _, c := range []struct {
		o     Options
		field string
	}{
		{Options{}, "block size"},
		{Options{BlockSize: 1000}, "block size"},
		{Options{BlockSize: 512, Guard: 3}, "guard"},
		{Options{BlockSize: 512, MetadataSize: -1}, "metadata size"},
		{Options{BlockSize: 512, Guard: Guard64, MetadataSize: 8}, "metadata size"},
		{Options{BlockSize: 512, Type: 4}, "type"},
		{Options{BlockSize: 512, Position: 2}, "position"},
		{Options{BlockSize: 512, StorageTagBits: -1}, "storage tag bits"},
		{Options{BlockSize: 512, Guard: Guard64, StorageTagBits: 49}, "storage tag bits"},
		{Options{BlockSize: 512, Layout: 2}, "layout"},
	} {
		_, err := NewFormat(c.o)
		var fe *FormatError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("NewFormat(%+v) = %v, want a *FormatError on %q", c.o, err, c.field)
		}
	}
}

func TestAccessors(t *testing.T) {
	f := MustFormat("4096+64:crc32:type3:pi-first:sts=16:dix")
	got := []int{f.BlockSize(), f.MetadataSize(), f.ExtendedBlockSize(), f.TupleSize(), f.StorageTagBits(), f.RefTagBits(), f.PIOffset(), f.GuardCoverage()}
	want := []int{4096, 64, 4160, 16, 16, 64, 0, 4096}
	if !equalInts(got, want) || f.Guard() != Guard32 || f.Type() != Type3 || f.Position() != PIFirst || f.Layout() != Separate {
		t.Errorf("accessors %v, want %v", got, want)
	}
	f = MustFormat("512+24:crc64")
	got = []int{f.ExtendedBlockSize(), f.TupleSize(), f.RefTagBits(), f.PIOffset(), f.GuardCoverage()}
	want = []int{536, 16, 48, 8, 520}
	if !equalInts(got, want) {
		t.Errorf("accessors %v, want %v", got, want)
	}
	if o := f.Options(); o != (Options{BlockSize: 512, MetadataSize: 24, Guard: Guard64, Type: Type1}) {
		t.Errorf("Options %+v", o)
	}
	if g, _ := NewFormat(f.Options()); g != f {
		t.Errorf("NewFormat(Options()) = %v", g)
	}
	if f.WithLayout(Separate).String() != "512+24:crc64:dix" || (Format{}).WithLayout(Separate).Valid() {
		t.Error("WithLayout")
	}
	var z Format
	if z.Valid() || z.String() != "invalid" {
		t.Error("zero Format")
	}
	for _, err := range []error{
		z.Generate(make([]byte, 520), nil, Params{}),
		z.Verify(make([]byte, 520), nil, Params{}),
	} {
		var fe *FormatError
		if !errors.As(err, &fe) {
			t.Errorf("zero Format: %v", err)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestTextMarshal(t *testing.T) {
	type manifest struct{ Format Format }
	in := manifest{MustFormat("4096+16:crc64:pi-first")}
	b, err := json.Marshal(in)
	if err != nil || string(b) != `{"Format":"4096+16:crc64:pi-first"}` {
		t.Fatalf("%s %v", b, err)
	}
	var out manifest
	if err := json.Unmarshal(b, &out); err != nil || out != in {
		t.Fatalf("%+v %v", out, err)
	}
	if err := json.Unmarshal([]byte(`{"Format":"512+4"}`), &out); err == nil {
		t.Fatal("bad format accepted")
	}
	if _, err := json.Marshal(manifest{}); err == nil {
		t.Fatal("zero Format marshalled")
	}
}

func TestBufferErrors(t *testing.T) {
	il := MustFormat("512+8")
	dix := MustFormat("512+8:dix")
	p := Params{}
	for name, err := range map[string]error{
		"interleaved short":    il.Generate(make([]byte, 519), nil, p),
		"interleaved md":       il.Verify(make([]byte, 520), make([]byte, 8), p),
		"dix data":             dix.Generate(make([]byte, 511), make([]byte, 8), p),
		"dix md short":         dix.Verify(make([]byte, 1024), make([]byte, 15), p),
		"dix md long":          dix.Verify(make([]byte, 1024), make([]byte, 17), p),
		"insert src":           il.Insert(make([]byte, 520), nil, make([]byte, 511), p),
		"strip dst":            il.Strip(make([]byte, 511), make([]byte, 520), nil, p),
		"to separate":          il.ToSeparate(make([]byte, 512), make([]byte, 7), make([]byte, 520)),
		"to separate count":    il.ToSeparate(make([]byte, 1024), make([]byte, 16), make([]byte, 520)),
		"to interleaved":       il.ToInterleaved(make([]byte, 519), make([]byte, 512), make([]byte, 8)),
		"to interleaved count": il.ToInterleaved(make([]byte, 1040), make([]byte, 512), make([]byte, 8)),
		"classify states":      func() error { _, err := il.Classify(&Classification{}, make([]byte, 520), nil, p); return err }(),
		"classify nil":         func() error { _, err := il.Classify(nil, make([]byte, 520), nil, p); return err }(),
		"blocks":               func() error { _, err := dix.Blocks(make([]byte, 512), nil); return err }(),
		"remap":                il.Remap(make([]byte, 521), nil, p, 0),
		"inject":               il.Inject(make([]byte, 1), nil, 0, FieldData, 0),
		"read tuple":           func() error { _, err := il.ReadTuple(make([]byte, 1), nil, 0); return err }(),
		"write tuple":          il.WriteTuple(make([]byte, 1), nil, 0, Tuple{}),
		"verify func nil buffer": func() error {
			_, err := il.VerifyFunc(make([]byte, 3), nil, p, func(*CheckError) error { return nil })
			return err
		}(),
	} {
		if !errors.Is(err, ErrBuffer) {
			t.Errorf("%s: %v, want ErrBuffer", name, err)
		}
	}
	for name, err := range map[string]error{
		"ref too wide":      il.Generate(make([]byte, 520), nil, Params{RefTag: 1 << 32}),
		"ref too wide sts":  MustFormat("512+8:sts=8").Verify(make([]byte, 520), nil, Params{RefTag: 1 << 24}),
		"storage too wide":  MustFormat("512+8:sts=8").Generate(make([]byte, 520), nil, Params{StorageTag: 256}),
		"storage none":      il.Generate(make([]byte, 520), nil, Params{StorageTag: 1}),
		"skip bits":         il.Verify(make([]byte, 520), nil, Params{Skip: 0x10}),
		"remap new ref":     il.Remap(make([]byte, 520), nil, p, 1<<32),
		"inject block":      il.Inject(make([]byte, 520), nil, 1, FieldData, 0),
		"inject bit":        il.Inject(make([]byte, 520), nil, 0, FieldData, 4096),
		"inject neg bit":    il.Inject(make([]byte, 520), nil, 0, FieldGuard, -1),
		"inject storage":    il.Inject(make([]byte, 520), nil, 0, FieldStorageTag, 0),
		"inject md":         il.Inject(make([]byte, 520), nil, 0, FieldMetadata, 0),
		"inject field":      il.Inject(make([]byte, 520), nil, 0, Field(99), 0),
		"read tuple block":  func() error { _, err := il.ReadTuple(make([]byte, 520), nil, -1); return err }(),
		"write tuple block": il.WriteTuple(make([]byte, 520), nil, 1, Tuple{}),
		"insert params":     il.Insert(make([]byte, 520), nil, make([]byte, 512), Params{RefTag: 1 << 40}),
		"negative lba":      il.Verify(make([]byte, 520), nil, Params{LBA: -1}),
		"negative lba gen":  il.Generate(make([]byte, 520), nil, Params{LBA: -1}),
	} {
		if !errors.Is(err, ErrParams) {
			t.Errorf("%s: %v, want ErrParams", name, err)
		}
	}
	// Wide ref tags are allowed where the format has room.
	if err := MustFormat("512+16:crc32").Generate(make([]byte, 528), nil, Params{RefTag: ^uint64(0)}); err != nil {
		t.Error(err)
	}
}
