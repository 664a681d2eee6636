package main

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"strconv"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/store"
)

// cmdAttack is the testscript command "attack", an attacker who can write
// a protected image and its Pebble store but has no key (keyed.txtar):
//
//	attack fill IMAGE SIZE SEED        write SIZE bytes of seeded random data
//	attack flip IMAGE LBA              flip a data bit and recompute the tuple and sector sum
//	attack copy IMAGE FROM TO          copy block FROM over block TO, with a tuple made for TO
//	attack copyvol OTHER IMAGE LBA     copy block LBA of image OTHER (its own store) over IMAGE's
//	attack tag IMAGE LBA               flip a bit of the block's stored keyed tag, CRC recomputed
//	attack unwritten IMAGE LBA         zero the block and mark it unwritten in the tuple page
//	attack tuple IMAGE LBA FIELD       flip a bit of the block's guard, app tag or sector sum
//	                                   (FIELD guard|app|sum) in its tuple page, data untouched
//	attack emptypage IMAGE LBA         zero every block of LBA's tag page on the device, put the
//	                                   empty record in place of its tuple page, delete its tag page
//	attack deltag IMAGE PAGE           delete tag page PAGE
//	attack deltuple IMAGE PAGE         delete tuple page PAGE (no record at all)
//	attack delrun IMAGE PAGE           delete the empty run that ends at page PAGE
//	attack delseal IMAGE -             delete the seal record
//	attack save IMAGE LBA FILE         save the block's data and its tag and tuple page records
//	attack restore IMAGE LBA FILE      put them back (a replay of one block)
//	attack savevol IMAGE COPY          copy the image and its store to COPY and COPY.difdb
//	attack restorevol COPY IMAGE       put the copy back over the image and its store
func cmdAttack(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 3 {
		ts.Fatalf("usage: attack fill|flip|copy|copyvol|tag|unwritten|tuple|emptypage|deltag|deltuple|delrun ...")
	}
	num := func(s string) int64 {
		n, err := strconv.ParseInt(s, 0, 64)
		ts.Check(err)
		return n
	}
	switch args[0] {
	case "fill":
		b := make([]byte, num(args[2]))
		r := rand.New(rand.NewPCG(uint64(num(args[3])), 1))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		ts.Check(os.WriteFile(ts.MkAbs(args[1]), b, 0o644))
	case "flip":
		a := openAttack(ts, args[1])
		defer a.close()
		lba := num(args[2])
		b := a.read(lba)
		b[100] ^= 0x04
		a.write(lba, b)
	case "copy":
		a := openAttack(ts, args[1])
		defer a.close()
		a.write(num(args[3]), a.read(num(args[2])))
	case "copyvol":
		o := openAttack(ts, args[1])
		lba := num(args[3])
		b := o.read(lba)
		o.close()
		a := openAttack(ts, args[2])
		defer a.close()
		a.write(lba, b)
	case "tag":
		a := openAttack(ts, args[1])
		defer a.close()
		lba := uint64(num(args[2]))
		p := uint64(a.t.Manifest().PageTuples)
		name := blockdev.DefaultVolumeName
		key := append([]byte{'T', byte(len(name))}, name...)
		key = binary.BigEndian.AppendUint64(append(key, 'K'), lba/p)
		v, err := a.kv.Get(key)
		ts.Check(err)
		v = bytes.Clone(v)
		v[8+int(lba%p)*store.TagRecordSize+8] ^= 1
		binary.BigEndian.PutUint32(v[len(v)-4:], crc32c.Checksum(v[:len(v)-4]))
		bt := a.kv.NewBatch()
		ts.Check(bt.Set(key, v))
		ts.Check(bt.Commit(true))
	case "unwritten":
		a := openAttack(ts, args[1])
		defer a.close()
		lba := num(args[2])
		_, err := a.dev.WriteAt(make([]byte, a.f.BlockSize()), lba*int64(a.f.BlockSize()))
		ts.Check(err)
		ts.Check(a.t.Discard(lba, 1, true))
	case "tuple":
		a := openAttack(ts, args[1])
		defer a.close()
		lba := num(args[2])
		tuple := make([]byte, a.f.TupleSize())
		var sums []uint32
		if a.t.Manifest().SectorSums {
			sums = make([]uint32, 1)
		}
		_, err := a.t.ReadRange(lba, tuple, sums, nil)
		ts.Check(err)
		switch args[3] {
		case "guard":
			tuple[0] ^= 1
		case "app": // after the guard: 2 bytes in an 8-byte tuple, 8 in a 16-byte one
			if a.f.TupleSize() == 8 {
				tuple[2] ^= 1
			} else {
				tuple[8] ^= 1
			}
		case "sum":
			if sums == nil {
				ts.Fatalf("attack tuple: the volume keeps no sector sums")
			}
			sums[0] ^= 1
		default:
			ts.Fatalf("attack tuple: unknown field %q", args[3])
		}
		ts.Check(a.t.WriteRange(lba, tuple, sums, true))
	case "emptypage":
		a := openAttack(ts, args[1])
		defer a.close()
		p := int64(a.t.Manifest().PageTuples)
		first := num(args[2]) / p * p
		n := min(p, a.t.Blocks()-first)
		bs := int64(a.f.BlockSize())
		_, err := a.dev.WriteAt(make([]byte, n*bs), first*bs)
		ts.Check(err)
		ts.Check(a.t.Discard(first, n, true))
		a.delete('K', first/p)
	case "deltag":
		a := openAttack(ts, args[1])
		defer a.close()
		a.delete('K', num(args[2]))
	case "deltuple":
		a := openAttack(ts, args[1])
		defer a.close()
		a.delete('P', num(args[2]))
	case "delrun":
		a := openAttack(ts, args[1])
		defer a.close()
		a.delete('R', num(args[2]))
	case "delseal":
		a := openAttack(ts, args[1])
		defer a.close()
		name := blockdev.DefaultVolumeName
		key := append(append([]byte{'T', byte(len(name))}, name...), 'S')
		if _, err := a.kv.Get(key); err != nil {
			ts.Fatalf("attack: no seal record: %v", err)
		}
		b := a.kv.NewBatch()
		ts.Check(b.Delete(key))
		ts.Check(b.Commit(true))
	case "save", "restore":
		a := openAttack(ts, args[1])
		defer a.close()
		lba := num(args[2])
		p := lba / int64(a.t.Manifest().PageTuples)
		keys := [][]byte{a.recKey('K', p), a.recKey('P', p)}
		if args[0] == "save" {
			var out []byte
			for _, v := range [][]byte{a.read(lba), a.get(keys[0]), a.get(keys[1])} {
				out = binary.BigEndian.AppendUint32(out, uint32(len(v)))
				out = append(out, v...)
			}
			ts.Check(os.WriteFile(ts.MkAbs(args[3]), out, 0o644))
			return
		}
		in, err := os.ReadFile(ts.MkAbs(args[3]))
		ts.Check(err)
		var vals [][]byte
		for len(in) > 0 {
			n := binary.BigEndian.Uint32(in)
			vals, in = append(vals, in[4:4+n]), in[4+n:]
		}
		_, err = a.dev.WriteAt(vals[0], lba*int64(a.f.BlockSize()))
		ts.Check(err)
		b := a.kv.NewBatch()
		ts.Check(b.Set(keys[0], vals[1]))
		ts.Check(b.Set(keys[1], vals[2]))
		ts.Check(b.Commit(true))
	case "savevol", "restorevol":
		ts.Check(copyVolume(ts.MkAbs(args[1]), ts.MkAbs(args[2])))
	default:
		ts.Fatalf("attack: unknown %q", args[0])
	}
}

// copyVolume copies an image and its Pebble store (IMAGE.difdb) over the
// image to and its store.
func copyVolume(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		return err
	}
	if err := os.RemoveAll(to + storeSuffix); err != nil {
		return err
	}
	return os.CopyFS(to+storeSuffix, os.DirFS(from+storeSuffix))
}

// delete deletes the record of type typ ('K' tag page, 'P' tuple page) of
// page page of the volume.
func (a *attack) delete(typ byte, page int64) {
	name := blockdev.DefaultVolumeName
	key := append([]byte{'T', byte(len(name))}, name...)
	key = binary.BigEndian.AppendUint64(append(key, typ), uint64(page))
	if _, err := a.kv.Get(key); err != nil {
		a.ts.Fatalf("attack: no record %x: %v", key, err)
	}
	b := a.kv.NewBatch()
	a.ts.Check(b.Delete(key))
	a.ts.Check(b.Commit(true))
}

// recKey is the store key of the record of type typ of page page.
func (a *attack) recKey(typ byte, page int64) []byte {
	name := blockdev.DefaultVolumeName
	key := append([]byte{'T', byte(len(name))}, name...)
	return binary.BigEndian.AppendUint64(append(key, typ), uint64(page))
}

func (a *attack) get(key []byte) []byte {
	v, err := a.kv.Get(key)
	a.ts.Check(err)
	return bytes.Clone(v)
}

type attack struct {
	ts  *testscript.TestScript
	dev *os.File
	kv  store.KV
	t   *store.Tuples
	f   dif.Format
}

func openAttack(ts *testscript.TestScript, image string) *attack {
	path := ts.MkAbs(image)
	dev, err := os.OpenFile(path, os.O_RDWR, 0)
	ts.Check(err)
	kv, err := store.OpenWith("pebble:"+path+storeSuffix, store.OpenOptions{})
	ts.Check(err)
	t, err := store.OpenTuples(kv, blockdev.DefaultVolumeName, nil)
	ts.Check(err)
	f, err := dif.Parse(t.Manifest().Format)
	ts.Check(err)
	return &attack{ts: ts, dev: dev, kv: kv, t: t, f: f.WithLayout(dif.Separate)}
}

func (a *attack) close() {
	a.ts.Check(a.kv.Close())
	a.ts.Check(a.dev.Close())
}

func (a *attack) read(lba int64) []byte {
	b := make([]byte, a.f.BlockSize())
	_, err := a.dev.ReadAt(b, lba*int64(len(b)))
	a.ts.Check(err)
	return b
}

// write puts data at block lba and stores the tuple and sum that make it
// pass the CRC checks there.
func (a *attack) write(lba int64, data []byte) {
	_, err := a.dev.WriteAt(data, lba*int64(len(data)))
	a.ts.Check(err)
	m := a.t.Manifest()
	tuple := make([]byte, a.f.TupleSize())
	a.ts.Check(a.f.Generate(data, tuple, dif.Params{RefTag: m.InitialRefTag + uint64(lba), AppTag: m.AppTag, LBA: lba}))
	var sums []uint32
	if m.SectorSums {
		sums = []uint32{crc32c.Checksum(data)}
	}
	a.ts.Check(a.t.WriteRange(lba, tuple, sums, true))
}
