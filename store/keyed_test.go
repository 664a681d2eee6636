package store_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/store"
)

const (
	testUID   = "00112233445566778899aabbccddeeff"
	testCheck = "0123456789abcdef0123456789abcdef"
)

func keyedManifest(blocks int) store.Manifest {
	m := store.NewManifest("512+8:crc16:type1:pi-last", 512, 8, int64(blocks)*512, "dev")
	m.PageTuples = 64
	m.KeyCheck, m.VolumeUID = testCheck, testUID
	return m
}

var macKey = bytes.Repeat([]byte{7}, store.PageMACKeySize)

func newKeyed(t *testing.T, kv store.KV, name string, m store.Manifest) *store.Tuples {
	t.Helper()
	tp, err := store.CreateKeyedTuples(kv, name, m, macKey)
	if err != nil {
		t.Fatal(err)
	}
	return tp
}

func tagsFor(lba, n int, gen uint64) []store.KeyedTag {
	tags := make([]store.KeyedTag, n)
	for i := range tags {
		tags[i].Gen = gen
		binary.BigEndian.PutUint64(tags[i].Tag[:], uint64(lba+i))
		binary.BigEndian.PutUint64(tags[i].Tag[8:], gen)
	}
	return tags
}

func writeTags(t *testing.T, tp *store.Tuples, lba int, tags []store.KeyedTag) {
	t.Helper()
	x := tp.NewTxn()
	if err := x.WriteTags(int64(lba), tags); err != nil {
		t.Fatal(err)
	}
	if err := x.Commit(true); err != nil {
		t.Fatal(err)
	}
}

// resealCRC recomputes the trailing CRC-32C of a stored value, as an
// attacker who edits the store would.
func resealCRC(v []byte) []byte {
	v = bytes.Clone(v)
	binary.BigEndian.PutUint32(v[len(v)-4:], crc32c.Checksum(v[:len(v)-4]))
	return v
}

// rawKey finds the key of the stored record of volume name whose record
// type is typ and whose suffix is suffix.
func volKey(name string, typ byte, suffix ...byte) []byte {
	k := append([]byte{'T', byte(len(name))}, name...)
	k = append(k, typ)
	return append(k, suffix...)
}

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func set(t *testing.T, kv store.KV, k, v []byte) {
	t.Helper()
	b := kv.NewBatch()
	if err := b.Set(k, v); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
}

func TestKeyedManifest(t *testing.T) {
	kv := store.NewMem()
	defer kv.Close()
	tp := newKeyed(t, kv, "v", keyedManifest(200))
	if got := tp.Manifest().Schema; got != store.SchemaVersion {
		t.Fatalf("schema %d, want %d", got, store.SchemaVersion)
	}
	tp2, err := store.OpenTuples(kv, "v", nil)
	if err != nil {
		t.Fatal(err)
	}
	if m := tp2.Manifest(); !tp2.Keyed() || m.KeyCheck != testCheck || m.VolumeUID != testUID {
		t.Fatalf("reopened: keyed %v, %q %q", tp2.Keyed(), m.KeyCheck, m.VolumeUID)
	}
	for _, tc := range []struct{ name, check, uid string }{
		{"check-only", testCheck, ""},
		{"uid-only", "", testUID},
		{"short", testCheck[:30], testUID},
		{"upper", "0123456789ABCDEF0123456789ABCDEF", testUID},
	} {
		t.Run("bad="+tc.name, func(t *testing.T) {
			m := keyedManifest(200)
			m.KeyCheck, m.VolumeUID = tc.check, tc.uid
			if _, err := store.CreateKeyedTuples(store.NewMem(), "v", m, macKey); !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
		})
	}
	plain := store.NewManifest("512+8:crc16:type1:pi-last", 512, 8, 512*10, "d")
	tu, err := store.CreateTuples(kv, "plain", plain)
	if err != nil {
		t.Fatal(err)
	}
	if tu.Keyed() || tu.Manifest().Schema != store.SchemaVersion {
		t.Fatalf("unkeyed volume: keyed %v schema %d", tu.Keyed(), tu.Manifest().Schema)
	}
	if err := tu.SetPageMACKey(macKey); !errors.Is(err, store.ErrKeyed) {
		t.Fatalf("SetPageMACKey on an unkeyed volume: %v", err)
	}
	if err := tu.ReadTags(0, make([]store.KeyedTag, 1)); !errors.Is(err, store.ErrKeyed) {
		t.Fatalf("ReadTags on an unkeyed volume: %v", err)
	}
}

func TestKeyedTagsRoundTrip(t *testing.T) {
	for _, be := range kvBackends() {
		t.Run("kv="+be.name, func(t *testing.T) {
			kv := be.open(t)
			const blocks = 200 // 3 full pages of 64 and a partial one
			tp := newKeyed(t, kv, "v", keyedManifest(blocks))
			want := make([]store.KeyedTag, blocks)
			for _, w := range []struct {
				lba, n int
				gen    uint64
			}{{0, 200, 1}, {10, 5, 2}, {60, 70, 3}, {199, 1, 4}, {64, 64, 5}} {
				tags := tagsFor(w.lba, w.n, w.gen)
				writeTags(t, tp, w.lba, tags)
				copy(want[w.lba:], tags)
			}
			// A discard: generation 0.
			writeTags(t, tp, 20, make([]store.KeyedTag, 3))
			clear(want[20:23])
			for _, r := range [][2]int{{0, 200}, {63, 2}, {199, 1}, {5, 100}} {
				got := make([]store.KeyedTag, r[1])
				if err := tp.ReadTags(int64(r[0]), got); err != nil {
					t.Fatal(err)
				}
				for i := range got {
					if got[i] != want[r[0]+i] {
						t.Fatalf("block %d: %+v, want %+v", r[0]+i, got[i], want[r[0]+i])
					}
				}
			}
			if err := tp.ReadTags(199, make([]store.KeyedTag, 2)); !errors.Is(err, store.ErrOutOfRange) {
				t.Fatalf("read past the end: %v", err)
			}
			// Without the page key: the same tags, CRC checked only; no writes.
			ro, err := store.OpenTuples(kv, "v", nil)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]store.KeyedTag, blocks)
			if err := ro.ReadTags(0, got); err != nil {
				t.Fatal(err)
			}
			if got[150] != want[150] {
				t.Fatalf("without key: %+v, want %+v", got[150], want[150])
			}
			x := ro.NewTxn()
			if err := x.WriteTags(0, tagsFor(0, 1, 9)); !errors.Is(err, store.ErrKeyed) {
				t.Fatalf("WriteTags without the key: %v", err)
			}
			if err := x.ReserveGeneration(9); !errors.Is(err, store.ErrKeyed) {
				t.Fatalf("ReserveGeneration without the key: %v", err)
			}
		})
	}
}

// TestKeyedPageTamper edits the store as an attacker without the key
// would: every edit keeps the record's CRC-32C valid, and each must be
// reported as a *PageMACError naming the page, with the key, while a
// damaged CRC is a *CorruptError.
func TestKeyedPageTamper(t *testing.T) {
	const blocks = 256
	setup := func(t *testing.T) (store.KV, *store.Tuples) {
		kv := store.NewMem()
		t.Cleanup(func() { kv.Close() })
		tp := newKeyed(t, kv, "v", keyedManifest(blocks))
		writeTags(t, tp, 0, tagsFor(0, blocks, 1))
		return kv, tp
	}
	get := func(t *testing.T, kv store.KV, k []byte) []byte {
		v, err := kv.Get(k)
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Clone(v)
	}
	const recOff = 8 // first block record in a tag page
	for _, tc := range []struct {
		name  string
		edit  func(t *testing.T, kv store.KV)
		page  int64
		isMAC bool
	}{
		{"forged-tag", func(t *testing.T, kv store.KV) {
			k := volKey("v", 'K', u64(1)...)
			v := get(t, kv, k)
			v[recOff+5*24+8] ^= 1
			set(t, kv, k, resealCRC(v))
		}, 1, true},
		{"forged-generation", func(t *testing.T, kv store.KV) {
			k := volKey("v", 'K', u64(2)...)
			v := get(t, kv, k)
			binary.BigEndian.PutUint64(v[recOff:], 77)
			set(t, kv, k, resealCRC(v))
		}, 2, true},
		{"page-swapped", func(t *testing.T, kv store.KV) {
			set(t, kv, volKey("v", 'K', u64(3)...), get(t, kv, volKey("v", 'K', u64(0)...)))
		}, 3, true},
		{"page-from-other-volume", func(t *testing.T, kv store.KV) {
			m := keyedManifest(blocks)
			m.VolumeUID = "ffeeddccbbaa99887766554433221100"
			other := newKeyed(t, kv, "w", m)
			writeTags(t, other, 0, tagsFor(0, blocks, 1))
			set(t, kv, volKey("v", 'K', u64(0)...), get(t, kv, volKey("w", 'K', u64(0)...)))
		}, 0, true},
		{"crc-damage", func(t *testing.T, kv store.KV) {
			k := volKey("v", 'K', u64(1)...)
			v := get(t, kv, k)
			v[recOff+3] ^= 0x80
			set(t, kv, k, v)
		}, 1, false},
	} {
		t.Run("edit="+tc.name, func(t *testing.T) {
			kv, tp := setup(t)
			tc.edit(t, kv)
			err := tp.ReadTags(0, make([]store.KeyedTag, blocks))
			var me *store.PageMACError
			switch {
			case tc.isMAC && !errors.As(err, &me):
				t.Fatalf("got %v, want a *PageMACError", err)
			case tc.isMAC && (me.Page != tc.page || !errors.Is(err, store.ErrPageMAC)):
				t.Fatalf("got %v (page %d), want page %d", err, me.Page, tc.page)
			case !tc.isMAC && !errors.Is(err, store.ErrCorrupt):
				t.Fatalf("got %v, want ErrCorrupt", err)
			}
			if !tc.isMAC {
				return
			}
			// Without the key the edit is invisible to the store: the
			// volume's tag check is what catches it then.
			ro, err := store.OpenTuples(kv, "v", nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := ro.ReadTags(0, make([]store.KeyedTag, blocks)); err != nil {
				t.Fatalf("without the key: %v", err)
			}
			// A write of part of the page refuses to reseal it; a write
			// of the whole page replaces it.
			x := tp.NewTxn()
			if err := x.WriteTags(tc.page*64, tagsFor(int(tc.page*64), 1, 5)); err != nil {
				t.Fatal(err)
			}
			if err := x.Commit(true); !errors.Is(err, store.ErrPageMAC) {
				t.Fatalf("partial write over a forged page: %v", err)
			}
			writeTags(t, tp, int(tc.page*64), tagsFor(int(tc.page*64), 64, 6))
			if err := tp.ReadTags(0, make([]store.KeyedTag, blocks)); err != nil {
				t.Fatalf("after rewriting the page: %v", err)
			}
		})
	}
}

func TestKeyedTagIntents(t *testing.T) {
	kv := store.NewMem()
	defer kv.Close()
	const blocks = 1000
	tp := newKeyed(t, kv, "v", keyedManifest(blocks))
	x := tp.NewTxn()
	tuples := bytes.Repeat([]byte{1}, 8*600) // 600 blocks: 3 records of 256 blocks at most
	sums := make([]uint32, 600)
	id, err := x.RecordIntent(100, tuples, sums)
	if err != nil {
		t.Fatal(err)
	}
	tags := tagsFor(100, 600, 3)
	if err := x.RecordTagIntent(id, tags); err != nil {
		t.Fatal(err)
	}
	if err := x.RecordTagIntent(id, tags[:5]); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("short tag intent: %v", err)
	}
	if err := x.Commit(true); err != nil {
		t.Fatal(err)
	}
	records := 0
	for in, err := range tp.AllIntents() {
		if err != nil {
			t.Fatal(err)
		}
		got, err := tp.TagIntent(in.IntentID)
		if err != nil {
			t.Fatal(err)
		}
		off := in.LBA - 100
		for i := range got {
			if got[i] != tags[off+int64(i)] {
				t.Fatalf("intent block %d: %+v, want %+v", in.LBA+int64(i), got[i], tags[off+int64(i)])
			}
		}
		records++
	}
	if records != 3 {
		t.Fatalf("%d intent records, want 3", records)
	}
	x = tp.NewTxn()
	if err := x.DropIntent(id); err != nil {
		t.Fatal(err)
	}
	if err := x.Commit(true); err != nil {
		t.Fatal(err)
	}
	if _, err := tp.TagIntent(store.IntentID{LBA: 100, N: 256, Seq: id.Seq}); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("tag intent after DropIntent: %v, want it gone (corrupt: missing)", err)
	}
	it, err := kv.NewIter(volKey("v", 'J'), volKey("v", 'K'))
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	if it.Next() {
		t.Fatalf("DropIntent left tag intent record %x", it.Key())
	}
}

func TestKeyedGeneration(t *testing.T) {
	kv := store.NewMem()
	defer kv.Close()
	tp := newKeyed(t, kv, "v", keyedManifest(100))
	if g, err := tp.ReservedGeneration(); err != nil || g != 0 {
		t.Fatalf("fresh volume: %d, %v", g, err)
	}
	for _, g := range []uint64{5, 1 << 40, 1<<40 + 1} {
		x := tp.NewTxn()
		if err := x.ReserveGeneration(g); err != nil {
			t.Fatal(err)
		}
		if err := x.Commit(true); err != nil {
			t.Fatal(err)
		}
		if got, err := tp.ReservedGeneration(); err != nil || got != g {
			t.Fatalf("reserved %d: got %d, %v", g, got, err)
		}
	}
	// Rolled back by an attacker (CRC recomputed): the MAC catches it.
	k := volKey("v", 'G')
	v, err := kv.Get(k)
	if err != nil {
		t.Fatal(err)
	}
	v = bytes.Clone(v)
	binary.BigEndian.PutUint64(v[4:], 5)
	set(t, kv, k, resealCRC(v))
	if _, err := tp.ReservedGeneration(); !errors.Is(err, store.ErrPageMAC) {
		t.Fatalf("edited generation: %v", err)
	}
}

// TestKeyedTuplePageSealed: the MAC of a tag page seals the tuple page of
// the same number. An edit of the tuple page made without the page key
// (one tuple's guard, app tag or sector sum, or a block marked unwritten)
// fails ReadTags with a *PageMACError naming that page only; a tuple-only
// commit with the key seals the tag page again, so the volume's own
// writes stay clean; a tag page missing beside a written tuple page fails
// too.
func TestKeyedTuplePageSealed(t *testing.T) {
	const blocks = 256 // 4 pages of 64
	tuple := func(lba int, b byte) []byte { return bytes.Repeat([]byte{b, byte(lba)}, 4) }
	for _, edit := range []string{"guard", "app", "sum", "unwritten", "tag-page-missing"} {
		t.Run("edit="+edit, func(t *testing.T) {
			kv := store.NewMem()
			defer kv.Close()
			m := keyedManifest(blocks)
			m.SectorSums = true
			tp := newKeyed(t, kv, "v", m)
			// Pages 0-2 written with tuples and tags in one commit; page 3
			// stays empty, its tag page sealed empty at creation.
			var tup []byte
			sums := make([]uint32, 192)
			for i := range 192 {
				tup = append(tup, tuple(i, 1)...)
				sums[i] = uint32(i)
			}
			x := tp.NewTxn()
			if err := x.WriteRange(0, tup, sums); err != nil {
				t.Fatal(err)
			}
			if err := x.WriteTags(0, tagsFor(0, 192, 5)); err != nil {
				t.Fatal(err)
			}
			if err := x.Commit(true); err != nil {
				t.Fatal(err)
			}
			// A tuple-only commit with the key (page 1) reseals its tag page.
			if err := tp.WriteRange(70, tuple(70, 2), []uint32{9}, true); err != nil {
				t.Fatal(err)
			}
			got := make([]store.KeyedTag, blocks)
			if err := tp.ReadTags(0, got); err != nil {
				t.Fatalf("clean volume: %v", err)
			}
			// The attacker: no page key.
			at, err := store.OpenTuples(kv, "v", nil)
			if err != nil {
				t.Fatal(err)
			}
			const lba = 130 // page 2
			tb := make([]byte, 8)
			sb := make([]uint32, 1)
			if _, err := at.ReadRange(lba, tb, sb, nil); err != nil {
				t.Fatal(err)
			}
			switch edit {
			case "guard":
				tb[0] ^= 1
				err = at.WriteRange(lba, tb, sb, true)
			case "app":
				tb[2] ^= 1
				err = at.WriteRange(lba, tb, sb, true)
			case "sum":
				sb[0] ^= 1
				err = at.WriteRange(lba, tb, sb, true)
			case "unwritten":
				err = at.Discard(lba, 1, true)
			case "tag-page-missing":
				b := kv.NewBatch()
				if err = b.Delete(volKey("v", 'K', u64(2)...)); err == nil {
					err = b.Commit(true)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			err = tp.ReadTags(0, got)
			var pe *store.PageMACError
			if !errors.As(err, &pe) || !errors.Is(err, store.ErrPageMAC) {
				t.Fatalf("ReadTags after the %s edit: %v, want a *PageMACError", edit, err)
			}
			if len(pe.Pages) != 1 || pe.Pages[0] != 2 {
				t.Fatalf("pages failing: %v, want [2]", pe.Pages)
			}
			if missing := edit == "tag-page-missing"; pe.IsMissing(2) != missing || len(pe.Missing) != map[bool]int{true: 1}[missing] {
				t.Fatalf("missing pages %v, want page 2 missing: %v", pe.Missing, missing)
			}
			if edit != "tag-page-missing" && got[lba] != tagsFor(lba, 1, 5)[0] {
				t.Errorf("tags still read: %+v", got[lba])
			}
			// Without the key the CRCs alone are checked; a missing page
			// is seen all the same.
			err = at.ReadTags(0, got)
			if edit == "tag-page-missing" {
				if !errors.As(err, &pe) || !pe.IsMissing(2) {
					t.Errorf("without the key: %v, want tag page 2 missing", err)
				}
			} else if err != nil {
				t.Errorf("without the key: %v", err)
			}
		})
	}
}

// TestKeyedTagPagesSealedFromCreate: every tag page of a keyed volume is
// recorded from CreateKeyedTuples on, in an empty run sealed with the key
// until its blocks are written, and no tag page is ever deleted (a
// discard of a whole page seals it empty again), so that the attack of an
// attacker without the key who empties a tuple page and deletes its tag
// page (the blocks would read as unwritten zeros) fails ReadTags with the
// page in Missing, as does deleting any one tag page or the run.
func TestKeyedTagPagesSealedFromCreate(t *testing.T) {
	const blocks, P = 250, 64 // 4 pages, the last short
	count := func(t *testing.T, kv store.KV, typ byte) (n int) {
		t.Helper()
		it, err := kv.NewIter(volKey("v", typ), volKey("v", typ+1))
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		for it.Next() {
			n++
		}
		return n
	}
	tagPages := func(t *testing.T, kv store.KV) int { return count(t, kv, 'K') }
	setup := func(t *testing.T) (store.KV, *store.Tuples) {
		kv := store.NewMem()
		t.Cleanup(func() { kv.Close() })
		tp := newKeyed(t, kv, "v", keyedManifest(blocks))
		if n, r := tagPages(t, kv), count(t, kv, 'R'); n != 0 || r != 1 {
			t.Fatalf("%d tag pages and %d runs after create, want 0 and 1", n, r)
		}
		if err := tp.ReadTags(0, make([]store.KeyedTag, blocks)); err != nil {
			t.Fatalf("new volume: %v", err)
		}
		x := tp.NewTxn()
		if err := x.WriteRange(0, bytes.Repeat([]byte{1}, blocks*8), make([]uint32, blocks)); err != nil {
			t.Fatal(err)
		}
		if err := x.WriteTags(0, tagsFor(0, blocks, 3)); err != nil {
			t.Fatal(err)
		}
		if err := x.Commit(true); err != nil {
			t.Fatal(err)
		}
		if n, r := tagPages(t, kv), count(t, kv, 'R'); n != 4 || r != 0 {
			t.Fatalf("%d tag pages and %d runs after writing every block, want 4 and 0", n, r)
		}
		return kv, tp
	}
	del := func(t *testing.T, kv store.KV, k []byte) {
		t.Helper()
		b := kv.NewBatch()
		if err := b.Delete(k); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(true); err != nil {
			t.Fatal(err)
		}
	}
	wantMissing := func(t *testing.T, tp *store.Tuples, pages ...int64) {
		t.Helper()
		got := make([]store.KeyedTag, blocks)
		err := tp.ReadTags(0, got)
		var pe *store.PageMACError
		if !errors.As(err, &pe) || !slices.Equal(pe.Missing, pages) || !slices.Equal(pe.Pages, pages) || pe.Page != pages[0] {
			t.Fatalf("ReadTags: %v, want tag pages %v missing (and only they)", err, pages)
		}
		for _, page := range pages {
			for i := page * P; i < min((page+1)*P, blocks); i++ {
				if got[i] != (store.KeyedTag{}) {
					t.Fatalf("block %d of the missing page reads tag %+v", i, got[i])
				}
			}
		}
	}
	t.Run("attack=empty-tuple-page-and-delete-tag-page", func(t *testing.T) {
		kv, tp := setup(t)
		at, err := store.OpenTuples(kv, "v", nil) // no page key
		if err != nil {
			t.Fatal(err)
		}
		if err := at.Discard(64, 64, true); err != nil { // page 1: the empty record
			t.Fatal(err)
		}
		del(t, kv, volKey("v", 'K', u64(1)...))
		wantMissing(t, tp, 1)
		wantMissing(t, at, 1)
	})
	for page := range int64(4) {
		t.Run(fmt.Sprintf("attack=delete-tag-page/page=%d", page), func(t *testing.T) {
			kv, tp := setup(t)
			del(t, kv, volKey("v", 'K', u64(uint64(page))...))
			wantMissing(t, tp, page)
		})
	}
	t.Run("attack=delete-run", func(t *testing.T) {
		kv := store.NewMem()
		defer kv.Close()
		tp := newKeyed(t, kv, "v", keyedManifest(blocks))
		writeTags(t, tp, 64, tagsFor(64, 64, 3)) // page 1: runs [0, 1) and [2, 4)
		del(t, kv, volKey("v", 'R', u64(3)...))
		wantMissing(t, tp, 2, 3)
		at, err := store.OpenTuples(kv, "v", nil) // without the key too
		if err != nil {
			t.Fatal(err)
		}
		wantMissing(t, at, 2, 3)
		if _, err := at.ReadRange(0, make([]byte, blocks*8), make([]uint32, blocks), nil); !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("ReadRange without the run: %v, want ErrCorrupt", err)
		}
		if _, _, err := tp.CheckSeal(); !errors.Is(err, store.ErrSealMismatch) {
			t.Fatalf("CheckSeal without the run: %v, want ErrSealMismatch", err)
		}
	})
	t.Run("attack=forge-run", func(t *testing.T) {
		// Page 1 written; an attacker without the key deletes its records
		// and stretches the run after it over it: the run's MAC fails.
		kv := store.NewMem()
		defer kv.Close()
		tp := newKeyed(t, kv, "v", keyedManifest(blocks))
		writeTags(t, tp, 64, tagsFor(64, 64, 3))
		rk := volKey("v", 'R', u64(3)...)
		v := kvGet(t, kv, rk)
		binary.BigEndian.PutUint64(v[4:], 1) // first page 1
		set(t, kv, rk, resealCRC(v))
		del(t, kv, volKey("v", 'K', u64(1)...))
		del(t, kv, volKey("v", 'P', u64(1)...))
		err := tp.ReadTags(0, make([]store.KeyedTag, blocks))
		var pe *store.PageMACError
		if !errors.As(err, &pe) || len(pe.Missing) != 0 || !slices.Equal(pe.Pages, []int64{1, 2, 3}) {
			t.Fatalf("ReadTags over a forged run: %v, want pages 1-3 failing their MAC", err)
		}
		// Writing a page of it whole does not launder it: the parts of
		// the run would carry the key's MAC.
		x := tp.NewTxn()
		if err := x.WriteRange(128, make([]byte, 64*8), make([]uint32, 64)); err != nil {
			t.Fatal(err)
		}
		if err := x.WriteTags(128, tagsFor(128, 64, 4)); err != nil {
			t.Fatal(err)
		}
		if err := x.Commit(true); !errors.Is(err, store.ErrPageMAC) {
			t.Fatalf("a write into a forged run: %v, want ErrPageMAC", err)
		}
	})
	t.Run("attack=replay-run", func(t *testing.T) {
		// The run of creation put back over page 1, written since, with
		// page 1's records deleted: the run's MAC is the key's, so reads
		// take it; the seal finds it.
		kv := store.NewMem()
		defer kv.Close()
		tp := newKeyed(t, kv, "v", keyedManifest(blocks))
		rk := volKey("v", 'R', u64(3)...)
		old := kvGet(t, kv, rk)
		writeTags(t, tp, 64, tagsFor(64, 64, 3))
		del(t, kv, volKey("v", 'R', u64(0)...))
		del(t, kv, volKey("v", 'K', u64(1)...))
		del(t, kv, volKey("v", 'P', u64(1)...))
		set(t, kv, rk, old)
		if err := tp.ReadTags(0, make([]store.KeyedTag, blocks)); err != nil {
			t.Fatalf("ReadTags over the replayed run: %v", err)
		}
		if _, _, err := tp.CheckSeal(); !errors.Is(err, store.ErrSealMismatch) {
			t.Fatalf("CheckSeal over the replayed run: %v, want ErrSealMismatch", err)
		}
	})
	t.Run("attack=empty-page-from-another-page", func(t *testing.T) {
		kv := store.NewMem()
		defer kv.Close()
		tp := newKeyed(t, kv, "v", keyedManifest(blocks))
		writeTags(t, tp, 0, tagsFor(0, 128, 3))
		writeTags(t, tp, 0, make([]store.KeyedTag, 64))
		// Page 0 is sealed empty; put it in place of page 1 and empty
		// page 1's tuple page.
		v, err := kv.Get(volKey("v", 'K', u64(0)...))
		if err != nil {
			t.Fatal(err)
		}
		set(t, kv, volKey("v", 'K', u64(1)...), bytes.Clone(v))
		err = tp.ReadTags(0, make([]store.KeyedTag, blocks))
		var pe *store.PageMACError
		if !errors.As(err, &pe) || pe.Page != 1 || len(pe.Missing) != 0 {
			t.Fatalf("ReadTags: %v, want tag page 1 failing its MAC", err)
		}
	})
	t.Run("op=discard-whole-pages", func(t *testing.T) {
		kv, tp := setup(t)
		x := tp.NewTxn()
		if err := x.Discard(0, blocks); err != nil {
			t.Fatal(err)
		}
		if err := x.WriteTags(0, make([]store.KeyedTag, blocks)); err != nil {
			t.Fatal(err)
		}
		if err := x.Commit(true); err != nil {
			t.Fatal(err)
		}
		if n := tagPages(t, kv); n != 4 {
			t.Fatalf("%d tag pages after discarding everything, want 4", n)
		}
		got := make([]store.KeyedTag, blocks)
		if err := tp.ReadTags(0, got); err != nil {
			t.Fatalf("after the discard: %v", err)
		}
		for i, g := range got {
			if g != (store.KeyedTag{}) {
				t.Fatalf("block %d: tag %+v after the discard", i, g)
			}
		}
		if v, err := kv.Get(volKey("v", 'K', u64(2)...)); err != nil || len(v) != 44 {
			t.Fatalf("discarded page: %d bytes (%v), want the 44-byte empty form", len(v), err)
		}
	})
}

// TestKeyedCreateNeedsPageKey: a keyed volume is created only with its page
// key (CreateTuples and CreateJournaled refuse it: its tag pages could not
// be sealed), and a keyed store of schema 3 (tag pages missing where
// nothing was written) is refused at open with a clear error.
func TestKeyedCreateNeedsPageKey(t *testing.T) {
	kv := store.NewMem()
	defer kv.Close()
	if _, err := store.CreateTuples(kv, "v", keyedManifest(100)); !errors.Is(err, store.ErrKeyed) {
		t.Fatalf("CreateTuples of a keyed manifest: %v, want ErrKeyed", err)
	}
	if _, err := store.CreateJournaled(kv, "v", keyedManifest(100), store.Journal{Op: store.OpImport}); !errors.Is(err, store.ErrKeyed) {
		t.Fatalf("CreateJournaled of a keyed manifest: %v, want ErrKeyed", err)
	}
	if _, err := store.CreateKeyedTuples(kv, "v", keyedManifest(100), macKey[:5]); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("short page key: %v, want ErrInvalid", err)
	}
	if _, err := store.CreateKeyedTuples(kv, "v", store.NewManifest("f", 512, 8, 512*10, "d"), macKey); !errors.Is(err, store.ErrKeyed) {
		t.Fatalf("CreateKeyedTuples of an unkeyed manifest: %v, want ErrKeyed", err)
	}
	newKeyed(t, kv, "v", keyedManifest(100))
	mk := volKey("v", 'M')
	// A creation by an earlier version interrupted before its manifest
	// left only empty pages, tag pages included: nothing that stops a new
	// protect, which replaces them.
	if _, err := store.CreateLegacy(kv, "w", keyedManifest(1000), macKey, store.SealedSchemaVersion); err != nil {
		t.Fatal(err)
	}
	b := kv.NewBatch()
	if err := b.Delete(volKey("w", 'M')); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(volKey("w", 'S')); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	if has, err := store.HasRecords(kv, "w"); err != nil || has {
		t.Fatalf("HasRecords of a keyed volume without its manifest: %v, %v; want only empty pages", has, err)
	}
	w := newKeyed(t, kv, "w", keyedManifest(1000))
	if err := w.ReadTags(0, make([]store.KeyedTag, 1000)); err != nil {
		t.Fatalf("created over the empty pages of an interrupted creation: %v", err)
	}
	checkSeal(t, w, 1)
	// A volume of this version that lost its manifest still has its run.
	kvPut(t, kv, volKey("w", 'M'), nil)
	kvPut(t, kv, volKey("w", 'S'), nil)
	if has, err := store.HasRecords(kv, "w"); err != nil || !has {
		t.Fatalf("HasRecords of a volume that lost its manifest: %v, %v; want its run", has, err)
	}
	v, err := kv.Get(mk)
	if err != nil {
		t.Fatal(err)
	}
	old := bytes.Replace(bytes.Clone(v), []byte(`"schema":7`), []byte(`"schema":3`), 1)
	if bytes.Equal(old, v) {
		t.Fatalf("manifest %s has no schema 7", v)
	}
	set(t, kv, mk, old)
	_, err = store.OpenTuples(kv, "v", nil)
	if !errors.Is(err, store.ErrUnsupported) || !strings.Contains(err.Error(), "--reprotect") {
		t.Fatalf("schema 3 keyed store: %v, want ErrUnsupported saying --reprotect", err)
	}
}
