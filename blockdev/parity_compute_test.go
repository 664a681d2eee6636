package blockdev

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/difctl/difctl/blockdev/faultdev"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/kernels/crct10dif"
)

// TestComputeParityFile computes the parity of volumes over image files,
// read through the file's mapping and with NoMap through ReadAt, with a
// block whose guard fails and, with sector sums, one whose guard passes
// but whose sector sum does not: their stripes are left unprotected and every other stripe's
// parity is the model's; once the blocks are mended the two are computed.
// The windows are small, so that runs of computed stripes are cut by the
// unprotected ones and by the windows' ends.
func TestComputeParityFile(t *testing.T) {
	blocktest.SkipNoMmap(t)
	defer func(w int) { parityWindowBytes = w }(parityWindowBytes)
	for _, c := range []struct {
		format string
		blocks int // more than one 1 MiB verification chunk
		sums   bool
	}{{"512+8", 2300, true}, {"4096+16:crc64", 300, false}} {
		for _, win := range []int{4 * 4096 * 7, 16 << 20} {
			for _, noMap := range []bool{false, true} {
				t.Run(fmt.Sprintf("format=%s/window=%d/nomap=%v", c.format, win, noMap), func(t *testing.T) {
					testComputeParityFile(t, c.format, c.blocks, c.sums, win, noMap)
				})
			}
		}
	}
}

func testComputeParityFile(t *testing.T, format string, blocks int, sums bool, win int, noMap bool) {
	parityWindowBytes = win
	v, path, model := fileVol(t, format, blocks, Options{NoMap: noMap})
	if (v.mapper == nil) != noMap || v.sums != sums {
		t.Fatalf("mapper %v, sums %v", v.mapper != nil, v.sums)
	}
	bs := v.BlockSize()
	if err := v.Discard(40*int64(bs), 9*int64(bs)); err != nil {
		t.Fatal(err)
	}
	clear(model[40*bs : 49*bs])
	unwritten := map[int64]bool{}
	for b := int64(40); b < 49; b++ {
		unwritten[b] = true
	}
	img, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	put := func(b int64, data []byte) {
		t.Helper()
		if _, err := img.WriteAt(data, b*int64(bs)); err != nil {
			t.Fatal(err)
		}
	}
	blockOf := func(b int64) []byte { return bytes.Clone(model[b*int64(bs) : (b+1)*int64(bs)]) }
	// A block whose guard fails: one byte flipped.
	bad := []int64{int64(blocks / 3)}
	d := blockOf(bad[0])
	d[100] ^= 0x40
	put(bad[0], d)
	if sums {
		// A block whose guard passes and whose sum fails: the CRC-16
		// generator, x^16 + 0x8BB7, added at the block's end has a zero
		// remainder, so the guard stays and the CRC-32C changes.
		b := int64(blocks - 5)
		d := blockOf(b)
		d[bs-3] ^= 0x01
		d[bs-2] ^= 0x8b
		d[bs-1] ^= 0xb7
		if crct10dif.Checksum(d) != crct10dif.Checksum(model[b*int64(bs):(b+1)*int64(bs)]) ||
			dif.SectorSum(d) == dif.SectorSum(model[b*int64(bs):(b+1)*int64(bs)]) {
			t.Fatal("the sum-only damage changes the guard or keeps the sum")
		}
		put(b, d)
		bad = append(bad, b)
	}

	pm := addMemParity(t, v, ParitySpec{Data: 4, Parity: 2, Depth: 16, Path: "test.difpar"})
	rep, err := v.ComputeParity(context.Background(), nil)
	stripes, nbad := v.par.l.Stripes(), int64(len(bad))
	if err != nil || rep.Unprotected != nbad || rep.Computed != stripes-nbad {
		t.Fatalf("ComputeParity with bad blocks %v: %+v, %v (of %d stripes)", bad, rep, err, stripes)
	}
	for _, b := range bad {
		s, _ := v.par.l.Locate(b)
		v.par.mu.Lock()
		_, ok, _ := v.par.sums(s)
		v.par.mu.Unlock()
		if ok {
			t.Fatalf("stripe %d of bad block %d has parity", s, b)
		}
		put(b, blockOf(b))
	}
	rep, err = v.ComputeParity(context.Background(), nil)
	if err != nil || rep.Unprotected != 0 || rep.Computed != nbad || rep.Recorded != stripes-nbad {
		t.Fatalf("ComputeParity after mending: %+v, %v", rep, err)
	}
	wantParity(t, v, pm, model, unwritten)
}

// TestComputeParityReadError computes parity over a device on which one
// block of zeros cannot be read (a permanent read fault) and another fails its
// first read on its own: with Options.Rereads the first block's stripe is
// left unprotected, the second's, read again, is computed.
func TestComputeParityReadError(t *testing.T) {
	tv := newTestVol(t, "4096+8", 96, CreateOptions{Options: Options{Rereads: 1}})
	const gone, once = 37, 70
	// The unreadable block holds zeros, which its cleared buffer would
	// pass as: only the failed read keeps it out.
	tv.write(make([]byte, 4096), gone*4096)
	if err := tv.v.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := tv.fault.Inject(faultdev.Fault{Kind: faultdev.FailRead, Off: gone * 4096, Len: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := tv.fault.Inject(faultdev.Fault{Kind: faultdev.FailRead, Off: once * 4096, Len: 1, After: 1, Times: 1}); err != nil {
		t.Fatal(err)
	}
	pm := addMemParity(t, tv.v, ParitySpec{Data: 4, Parity: 1, Depth: 8, Path: "test.difpar"})
	rep, err := tv.v.ComputeParity(context.Background(), nil)
	stripes := tv.v.par.l.Stripes()
	if err != nil || rep.Unprotected != 1 || rep.Computed != stripes-1 {
		t.Fatalf("ComputeParity with block %d unreadable: %+v, %v (of %d stripes)", gone, rep, err, stripes)
	}
	s, _ := tv.v.par.l.Locate(gone)
	tv.v.par.mu.Lock()
	_, ok, _ := tv.v.par.sums(s)
	tv.v.par.mu.Unlock()
	if ok {
		t.Fatalf("stripe %d of the unreadable block has parity", s)
	}
	tv.fault.ClearFaults()
	if rep, err := tv.v.ComputeParity(context.Background(), nil); err != nil || rep.Computed != 1 {
		t.Fatalf("ComputeParity once readable: %+v, %v", rep, err)
	}
	wantParity(t, tv.v, pm, tv.model, nil)
}
