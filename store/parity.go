package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Reed-Solomon parity (package blockdev/parity, docs/parity.md). A volume
// may keep parity of its data in stripes of k data and m parity blocks, in
// a parity file beside the image. The store keeps:
//
//   - the parity configuration in the metadata record "parity" (JSON:
//     ParityConfig), with the manifest's feature FeatureParity, so that a
//     program that does not update parity refuses the volume instead of
//     writing data the parity no longer describes;
//   - the checksums of the parity blocks, SumPages of package
//     blockdev/parity, as 'Q' records keyed by page number; the store keeps
//     them as opaque values (the parity package encodes and checks them);
//   - the parity intents: one 'D' record per stripe whose parity is being
//     changed (a write, a rebuild), keyed by stripe number, recorded
//     durably before the first byte of the change reaches the data or the
//     parity file and deleted once both are durable and the stripe's
//     checksums committed. Recovery recomputes the parity of every stripe
//     named by a parity intent.
//
// Parity needs schema version 7 (RunsSchemaVersion) or later.

// FeatureParity: the volume has Reed-Solomon parity (parity.go), and its
// "parity" record must exist.
const FeatureParity = "parity"

const (
	recParitySums  = 'Q'
	recParityDirty = 'D'
	parityName     = "parity"
	parityKind     = "difctl.store.parity"
	// maxParityStripes bounds a stripe number in a parity intent key.
	maxParityStripes = 1 << 50
)

// ParityConfig is a volume's parity as the store records it.
type ParityConfig struct {
	// Data and Parity are k and m: 1 ≤ m ≤ k, k+m ≤ 256.
	Data   int `json:"k"`
	Parity int `json:"m"`
	// Depth is the interleave depth after defaults and clamping (≥ 1).
	Depth int64 `json:"depth"`
	// Path names the parity file or device, as the program that opens it
	// understands it.
	Path string `json:"path"`
	// ID is the parity file's identity, 32 hex digits chosen at random
	// when the parity was added; the parity file's header carries it, so
	// that a parity file of another volume (or an older one of this
	// volume) is refused.
	ID string `json:"id"`
	// Added is when the parity was added.
	Added time.Time `json:"added"`
}

type parityJSON struct {
	Kind string `json:"kind"`
	ParityConfig
}

func (t *Tuples) parityKey() []byte { return append(recKey(t.prefix, recMeta), parityName...) }

func (t *Tuples) paritySumsKey(page int64) []byte { return u64Key(t.prefix, recParitySums, page) }

func (t *Tuples) parityDirtyKey(stripe int64) []byte {
	return u64Key(t.prefix, recParityDirty, stripe)
}

// checkParity validates a configuration against the volume.
func (t *Tuples) checkParity(c ParityConfig) error {
	switch {
	case c.Data < 1 || c.Parity < 1 || c.Parity > c.Data || c.Data+c.Parity > 256:
		return fmt.Errorf("parity %d+%d: want 1 ≤ m ≤ k and k+m ≤ 256", c.Data, c.Parity)
	case c.Depth < 1 || c.Depth > t.blocks:
		return fmt.Errorf("parity depth %d out of [1, %d]", c.Depth, t.blocks)
	case c.Path == "" || len(c.Path) > maxNameLen:
		return fmt.Errorf("parity path of %d bytes", len(c.Path))
	case !isHex128(c.ID):
		return fmt.Errorf("parity id %q is not 32 lower-case hex digits", c.ID)
	}
	return nil
}

// Parity returns the volume's parity configuration, and false if it has
// none. A volume with the feature FeatureParity and no valid record is
// corrupt (*CorruptError).
func (t *Tuples) Parity() (ParityConfig, bool, error) {
	v, err := t.kv.Get(t.parityKey())
	if errors.Is(err, ErrNotFound) {
		if t.m.HasFeature(FeatureParity) {
			return ParityConfig{}, false, &CorruptError{Volume: t.volume, Record: parityName, Reason: "missing in a volume with the feature parity"}
		}
		return ParityConfig{}, false, nil
	} else if err != nil {
		return ParityConfig{}, false, err
	}
	corrupt := func(reason string) error {
		return &CorruptError{Volume: t.volume, Record: parityName, Reason: reason}
	}
	if !t.m.HasFeature(FeatureParity) {
		return ParityConfig{}, false, corrupt("present in a volume without the feature parity")
	}
	var j parityJSON
	if err := decodeJSON(v, &j); err != nil {
		return ParityConfig{}, false, corrupt(err.Error())
	}
	if j.Kind != parityKind {
		return ParityConfig{}, false, corrupt(fmt.Sprintf("kind %q, want %q", j.Kind, parityKind))
	}
	if err := t.checkParity(j.ParityConfig); err != nil {
		return ParityConfig{}, false, corrupt(err.Error())
	}
	return j.ParityConfig, true, nil
}

// SetParity records c as the volume's parity (replacing any), with the
// feature FeatureParity, and deletes every parity checksum and parity
// intent of an earlier configuration: no stripe of the new parity is
// recorded until its checksums are committed (SetParitySums). It refuses
// a volume of a schema version before RunsSchemaVersion.
func (t *Tuples) SetParity(c ParityConfig, sync bool) error {
	if err := t.checkParity(c); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if t.m.Schema < RunsSchemaVersion {
		return fmt.Errorf("%w: volume %q: parity needs store schema version %d, the volume has %d (protect it again)", ErrUnsupported, t.volume, RunsSchemaVersion, t.m.Schema)
	}
	v, err := json.Marshal(parityJSON{Kind: parityKind, ParityConfig: c})
	if err != nil {
		return fmt.Errorf("store: %v", err)
	}
	return t.replaceParity(v, sync)
}

// RemoveParity deletes the volume's parity configuration, checksums and
// parity intents, and the feature FeatureParity.
func (t *Tuples) RemoveParity(sync bool) error { return t.replaceParity(nil, sync) }

// replaceParity deletes the parity records, sets the configuration record
// to v (none if nil) and the feature accordingly: the deletes in batches,
// the configuration last, in the same batch as the manifest.
func (t *Tuples) replaceParity(v []byte, sync bool) error {
	for _, typ := range []byte{recParitySums, recParityDirty} {
		if err := t.deleteRecords(typ); err != nil {
			return err
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.kv.NewBatch()
	defer b.Close()
	m := t.m
	m.Features = slices.DeleteFunc(slices.Clone(m.Features), func(f string) bool { return f == FeatureParity })
	if v != nil {
		m.Features = append(m.Features, FeatureParity)
		if err := b.Set(t.parityKey(), v); err != nil {
			return err
		}
	} else if err := b.Delete(t.parityKey()); err != nil {
		return err
	}
	if len(m.Features) == 0 {
		m.Features = nil
	}
	if !slices.Equal(m.Features, t.m.Features) {
		mv, err := encodeManifest(m)
		if err != nil {
			return err
		}
		if err := b.Set(recKey(t.prefix, recManifest), mv); err != nil {
			return err
		}
	}
	if err := b.Commit(sync); err != nil {
		return err
	}
	t.m.Features = m.Features
	return nil
}

// deleteRecords deletes every record of type typ of the volume, in
// batches of at most 4 MiB, not synced.
func (t *Tuples) deleteRecords(typ byte) error {
	lo := recKey(t.prefix, typ)
	hi := prefixEnd(lo)
	for {
		it, err := t.kv.NewIter(lo, hi)
		if err != nil {
			return err
		}
		b := t.kv.NewBatch()
		more := false
		for it.Next() {
			if b.Len() > 4<<20 {
				more = true
				break
			}
			if err := b.Delete(slices.Clone(it.Key())); err != nil {
				it.Close()
				b.Close()
				return err
			}
		}
		err = it.Err()
		it.Close()
		if err == nil {
			err = b.Commit(false)
		} else {
			b.Close()
		}
		if err != nil || !more {
			return err
		}
	}
}

// ParitySums returns the record of parity checksums page page, as
// SetParitySums stored it, or ErrNotFound if none is (no stripe of the
// page recorded).
func (t *Tuples) ParitySums(page int64) ([]byte, error) {
	if page < 0 || page >= maxParityStripes {
		return nil, fmt.Errorf("%w: parity checksums page %d", ErrOutOfRange, page)
	}
	return t.kv.Get(t.paritySumsKey(page))
}

// SetParitySums stages rec as the record of parity checksums page page.
func (x *Txn) SetParitySums(page int64, rec []byte) error {
	if err := x.usable(); err != nil {
		return err
	}
	if page < 0 || page >= maxParityStripes || len(rec) == 0 {
		return fmt.Errorf("%w: parity checksums page %d of %d bytes", ErrInvalid, page, len(rec))
	}
	x.ops = append(x.ops, txnOp{kind: opSet, key: x.t.paritySumsKey(page), value: slices.Clone(rec)})
	x.size += len(rec) + 32
	return nil
}

// parityDirtyValue is the value of a parity intent record: its kind and
// version, so that a damaged one is told from a valid one.
var parityDirtyValue = []byte("pd1")

// MarkParityDirty stages a parity intent for stripe: its parity is about
// to change.
func (x *Txn) MarkParityDirty(stripe int64) error {
	if err := x.usable(); err != nil {
		return err
	}
	if stripe < 0 || stripe >= maxParityStripes {
		return fmt.Errorf("%w: parity stripe %d", ErrInvalid, stripe)
	}
	x.ops = append(x.ops, txnOp{kind: opSet, key: x.t.parityDirtyKey(stripe), value: parityDirtyValue})
	x.size += 32
	return nil
}

// ClearParityDirty stages the deletion of stripe's parity intent.
func (x *Txn) ClearParityDirty(stripe int64) error {
	if err := x.usable(); err != nil {
		return err
	}
	if stripe < 0 || stripe >= maxParityStripes {
		return fmt.Errorf("%w: parity stripe %d", ErrInvalid, stripe)
	}
	x.ops = append(x.ops, txnOp{kind: opDelete, key: x.t.parityDirtyKey(stripe)})
	x.size += 32
	return nil
}

// ParityDirty returns the stripes with a parity intent, in order. A record
// that does not decode is corruption.
func (t *Tuples) ParityDirty() ([]int64, error) {
	lo := recKey(t.prefix, recParityDirty)
	it, err := t.kv.NewIter(lo, prefixEnd(lo))
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []int64
	for it.Next() {
		k := it.Key()
		if len(k) != len(lo)+8 || string(it.Value()) != string(parityDirtyValue) {
			return nil, &CorruptError{Volume: t.volume, Record: fmt.Sprintf("parity intent %x", k[len(lo):]), Reason: "bad key or value"}
		}
		s := keyInt(k[len(lo):])
		if s < 0 || s >= maxParityStripes {
			return nil, &CorruptError{Volume: t.volume, Record: "parity intent", Reason: fmt.Sprintf("stripe %d", s)}
		}
		out = append(out, s)
	}
	return out, it.Err()
}
