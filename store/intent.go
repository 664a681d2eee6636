package store

import (
	"encoding/binary"
	"fmt"
	"iter"

	"github.com/difctl/difctl/kernels/crc32c"
)

// Intents implement the crash-consistency contract (ARCHITECTURE.md, "The
// crash contract").
// Before a write's data may reach the device, the volume records the new
// tuples as an intent, beside the committed page, and makes it durable (one
// synced Txn for a whole group of writes). Once the data is durable the
// intent is folded into the committed pages. After a crash, Intents lists
// every open intent so recovery can check which tuple the data on disk
// matches: a block under an intent verifies against either.
//
// Intent record, schema version 1 (big-endian), one per at most
// 4*PageTuples blocks (longer intents are split into several records with
// the same sequence number):
//
//	'I' magic, version (1), flags (bit 0 = sums), tuple size,
//	block count n (uint32), n tuples, n sums (with flag), CRC-32C.

const (
	intentMagic   = 'I'
	intentVersion = 1
	intentHeader  = 8
)

// IntentID names an intent: its first block, block count and the sequence
// number that orders intents recorded over the same blocks (a larger Seq is
// newer).
type IntentID struct {
	LBA int64
	N   int64
	Seq uint64
}

// Intent is an open intent as stored: the tuples (N*TupleSize bytes) and,
// if the volume keeps them, sector checksums (N) intended for blocks
// [LBA, LBA+N).
type Intent struct {
	IntentID
	Tuples []byte
	Sums   []uint32
}

// Tuple returns the intended tuple of block lba, which must lie in the
// intent.
func (in *Intent) Tuple(lba int64) []byte {
	ts := int64(len(in.Tuples)) / in.N
	i := lba - in.LBA
	return in.Tuples[i*ts : (i+1)*ts]
}

// intentChunk is the most blocks one intent record holds.
func (t *Tuples) intentChunk() int64 { return 4 * int64(t.l.p) }

func (t *Tuples) intentKey(lba int64, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(u64Key(t.prefix, recIntent, lba), seq)
}

// RecordIntent stages an intent for blocks [lba, lba+len(tuples)/TupleSize)
// with the given new tuples and sums (required iff the volume keeps sector
// checksums). The committed tuples are untouched. It returns the intent's
// ID, for DropIntent.
func (x *Txn) RecordIntent(lba int64, tuples []byte, sums []uint32) (IntentID, error) {
	if err := x.usable(); err != nil {
		return IntentID{}, err
	}
	t := x.t
	n, err := t.checkBufs(lba, tuples, sums, true)
	if err != nil {
		return IntentID{}, err
	}
	if n == 0 {
		return IntentID{}, fmt.Errorf("%w: empty intent", ErrInvalid)
	}
	id := IntentID{LBA: lba, N: int64(n), Seq: t.seq.Add(1)}
	ts := t.l.ts
	chunk := int(t.intentChunk())
	for off := 0; off < n; off += chunk {
		c := min(chunk, n-off)
		v := make([]byte, 0, intentHeader+c*(ts+4)+4)
		v = append(v, intentMagic, intentVersion, t.l.flags(), byte(ts))
		v = binary.BigEndian.AppendUint32(v, uint32(c))
		v = append(v, tuples[off*ts:(off+c)*ts]...)
		if t.l.sums {
			for _, s := range sums[off : off+c] {
				v = binary.BigEndian.AppendUint32(v, s)
			}
		}
		v = binary.BigEndian.AppendUint32(v, crc32c.Checksum(v))
		x.add(txnOp{kind: opSet, key: t.intentKey(lba+int64(off), id.Seq), value: v})
		x.size += len(v) + 32
	}
	return id, nil
}

// DropIntent stages deleting an intent without touching committed tuples:
// recovery found the data still matches the committed tuple, or a torn
// block has been reported. id may be one returned by RecordIntent or one
// listed by Intents.
func (x *Txn) DropIntent(id IntentID) error {
	if err := x.usable(); err != nil {
		return err
	}
	chunk := x.t.intentChunk()
	for off := int64(0); off < id.N || off == 0; off += chunk {
		x.addDelete(x.t.intentKey(id.LBA+off, id.Seq))
	}
	if x.t.k != nil {
		x.dropTagIntent(id)
	}
	return nil
}

// FoldIntent stages making an intent's tuples the committed ones and
// deleting the intent: the data it covers is durable.
func (x *Txn) FoldIntent(in Intent) error {
	if err := x.WriteRange(in.LBA, in.Tuples, in.Sums); err != nil {
		return err
	}
	return x.DropIntent(in.IntentID)
}

// scanIntentKeys calls fn for every intent record whose first block lies in
// [lba-intentChunk+1, lba+n), in (LBA, Seq) order.
func (t *Tuples) scanIntentKeys(lba, n int64, fn func(lba int64, seq uint64, v []byte) error) error {
	lo := lba - min(lba, t.intentChunk()-1)
	hiKey := u64Key(t.prefix, recIntent, lba+n)
	if lba+n < lba { // overflow: scan to the end of the intents
		hiKey = recKey(t.prefix, recIntent+1)
	}
	it, err := t.kv.NewIter(u64Key(t.prefix, recIntent, lo), hiKey)
	if err != nil {
		return err
	}
	defer it.Close()
	plen := len(t.prefix) + 1
	for it.Next() {
		k := it.Key()
		if len(k) != plen+16 {
			return &CorruptError{Volume: t.volume, Record: fmt.Sprintf("intent key %x", k), Reason: "bad key length"}
		}
		klba := keyInt(k[plen:])
		if klba < 0 {
			return &CorruptError{Volume: t.volume, Record: fmt.Sprintf("intent key %x", k), Reason: "block number out of range"}
		}
		if err := fn(klba, binary.BigEndian.Uint64(k[plen+8:]), it.Value()); err != nil {
			return err
		}
	}
	return it.Err()
}

func (t *Tuples) decodeIntent(lba int64, seq uint64, v []byte) (Intent, error) {
	corrupt := func(format string, args ...any) error {
		return &CorruptError{Volume: t.volume, Record: fmt.Sprintf("intent lba=%d seq=%d", lba, seq), Reason: fmt.Sprintf(format, args...)}
	}
	if len(v) < intentHeader+4 {
		return Intent{}, corrupt("length %d", len(v))
	}
	if v[0] != intentMagic || v[1] != intentVersion || v[2] != t.l.flags() || int(v[3]) != t.l.ts {
		return Intent{}, corrupt("header %x does not match the manifest", v[:4])
	}
	n := int64(binary.BigEndian.Uint32(v[4:]))
	per := int64(t.l.ts)
	if t.l.sums {
		per += 4
	}
	if n == 0 || n > t.intentChunk() || int64(len(v)) != intentHeader+n*per+4 {
		return Intent{}, corrupt("%d blocks in %d bytes", n, len(v))
	}
	crcOff := len(v) - 4
	if got, want := crc32c.Checksum(v[:crcOff]), binary.BigEndian.Uint32(v[crcOff:]); got != want {
		return Intent{}, corrupt("checksum %08x, stored %08x", got, want)
	}
	if lba > t.blocks || n > t.blocks-lba {
		return Intent{}, corrupt("blocks [%d, +%d) beyond the volume", lba, n)
	}
	in := Intent{IntentID: IntentID{LBA: lba, N: n, Seq: seq}}
	tupEnd := intentHeader + int(n)*t.l.ts
	in.Tuples = append([]byte(nil), v[intentHeader:tupEnd]...)
	if t.l.sums {
		in.Sums = make([]uint32, n)
		decodeSums(in.Sums, v[tupEnd:crcOff])
	}
	return in, nil
}

// Intents yields the open intent records overlapping blocks [lba, lba+n),
// ordered by first LBA then sequence number, from one snapshot. Long intents
// appear as several records (each at most 4*PageTuples blocks) sharing a
// Seq. Iteration stops at the first error, which is yielded: an
// ErrOutOfRange error first for a negative lba or n.
func (t *Tuples) Intents(lba, n int64) iter.Seq2[Intent, error] {
	if lba < 0 || n < 0 {
		err := t.checkRange(lba, n)
		return func(yield func(Intent, error) bool) { yield(Intent{}, err) }
	}
	lba = min(lba, t.blocks)
	n = min(n, t.blocks-lba)
	return func(yield func(Intent, error) bool) {
		stop := fmt.Errorf("stop")
		err := t.scanIntentKeys(lba, n, func(ilba int64, seq uint64, v []byte) error {
			in, err := t.decodeIntent(ilba, seq, v)
			if err != nil {
				return err
			}
			if in.LBA+in.N <= lba || in.LBA >= lba+n {
				return nil // starts before the range and ends before it
			}
			if !yield(in, nil) {
				return stop
			}
			return nil
		})
		if err != nil && err != stop {
			yield(Intent{}, err)
		}
	}
}

// AllIntents yields every open intent of the volume, ordered by LBA: the
// work list of crash recovery.
func (t *Tuples) AllIntents() iter.Seq2[Intent, error] { return t.Intents(0, t.blocks) }
