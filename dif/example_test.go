package dif_test

import (
	"errors"
	"fmt"

	"github.com/difctl/difctl/dif"
)

// Generate protection information for a run of 520-byte sectors, verify
// it, then damage one sector and see the failure reported.
func ExampleFormat_Generate() {
	f, err := dif.Parse("512+8") // 512-byte blocks, 8-byte T10 DIF tuple, Type 1
	if err != nil {
		panic(err)
	}
	buf := make([]byte, 8*f.ExtendedBlockSize()) // 8 extended blocks
	for i := range buf {
		buf[i] = byte(i)
	}
	p := dif.Params{RefTag: 2048, LBA: 2048, AppTag: 0x1234, AppMask: 0xFFFF}
	if err := f.Generate(buf, nil, p); err != nil {
		panic(err)
	}
	fmt.Println("clean:", f.Verify(buf, nil, p))

	f.Inject(buf, nil, 5, dif.FieldData, 100) // flip one data bit of block 5
	err = f.Verify(buf, nil, p)
	var ce *dif.CheckError
	if errors.As(err, &ce) {
		fmt.Println("block", ce.Block, "LBA", ce.LBA, ce.Field, errors.Is(err, dif.ErrGuard))
	}
	fmt.Println(err)
	// Output:
	// clean: <nil>
	// block 5 LBA 2053 guard true
	// dif: 1 integrity failure in 1 block; first: block 5 (LBA 2053): guard mismatch: expected 0x11ff, stored 0x8ea
}

// Parse the text form of a format and read its geometry.
func ExampleParse() {
	f, err := dif.Parse("4096+64:crc32:type3:pi-first:sts=16:dix")
	if err != nil {
		panic(err)
	}
	fmt.Println(f, f.Guard(), f.Type(), f.Position(), f.Layout())
	fmt.Println("tuple", f.TupleSize(), "extended", f.ExtendedBlockSize(), "ref bits", f.RefTagBits())

	g, _ := dif.Parse("4096+16:crc64:type1:pi-last") // defaults written out
	fmt.Println(g)

	_, err = dif.Parse("512+8:crc64")
	fmt.Println(err)
	// Output:
	// 4096+64:crc32:type3:pi-first:sts=16:dix crc32 type3 pi-first dix
	// tuple 16 extended 4160 ref bits 64
	// 4096+16:crc64
	// dif: invalid format: metadata size "8": smaller than the 16-byte crc64 tuple
}

// Visit every failure of a run, and classify its blocks.
func ExampleFormat_VerifyFunc() {
	f := dif.MustFormat("512+16:crc64:dix")
	n := 6
	data, md := make([]byte, n*f.BlockSize()), make([]byte, n*f.MetadataSize())
	p := dif.Params{RefTag: 100}
	f.Generate(data, md, p)
	f.Inject(data, md, 1, dif.FieldRefTag, 0)
	f.Inject(data, md, 4, dif.FieldGuard, 63)
	f.WriteTuple(data, md, 3, f.UnwrittenTuple()) // a discarded block

	sum, err := f.VerifyFunc(data, md, p, func(ce *dif.CheckError) error {
		fmt.Printf("block %d: %v expected %#x stored %#x\n", ce.Block, ce.Field, ce.Expected, ce.Actual)
		return nil
	})
	fmt.Printf("%+v %v\n", sum, err)
	// Output:
	// block 1: ref tag expected 0x65 stored 0x64
	// block 4: guard expected 0x1de60e2868a782e9 stored 0x9de60e2868a782e9
	// {Blocks:6 OK:3 Escaped:0 Unwritten:1 Failed:2 Errors:2} <nil>
}

// Classify the blocks of a run while copying them out of a buffer the
// caller does not own, with their sector checksums.
func ExampleFormat_Classify() {
	f := dif.MustFormat("512+8:dix")
	n := 4
	src, md := make([]byte, n*f.BlockSize()), make([]byte, n*f.MetadataSize())
	p := dif.Params{RefTag: 7}
	f.Generate(src, md, p)
	f.WriteTuple(src, md, 2, f.UnwrittenTuple()) // a discarded block
	f.Inject(src, md, 3, dif.FieldData, 0)

	data := make([]byte, len(src))
	c := dif.Classification{States: make([]dif.State, n), Sums: make([]uint32, n), Src: src}
	sum, err := f.Classify(&c, data, md, p)
	fmt.Printf("%+v %v\n", sum, err)
	fmt.Println(c.States, c.Single)
	fmt.Printf("%#x %v\n", c.Sums[0], c.Sums[0] == dif.SectorSum(data[:f.BlockSize()]))
	// Output:
	// {Blocks:4 OK:2 Escaped:0 Unwritten:1 Failed:1 Errors:1} <nil>
	// [ok ok unwritten failed] true
	// 0x30fcedc0 true
}
