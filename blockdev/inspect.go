package blockdev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/difctl/difctl/blockdev/internal/check"
	"github.com/difctl/difctl/blockdev/parity"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// Inspection: what a store holds of a volume (its coverage, findings and
// scrub), and blocks shown with their stored tuple beside the one their
// data computes. The data is read directly, not through a Volume: nothing
// is re-read, recovered or recorded, so that a block is shown as it is.

// An InspectError is a failure of Inspect, InspectStored or SampleData
// other than a cancellation or a failure of dif. Op says what failed:
// "read" (the data of block LBA), "store" (the tuples or keyed tags of
// block LBA, or the checking of its keyed tag), "coverage" (counting the
// written blocks) or "findings" (reading the findings log); Err is the
// cause, as the device or the store gave it.
type InspectError struct {
	Op  string
	LBA int64
	Err error
}

func (e *InspectError) Error() string {
	switch e.Op {
	case "read", "store":
		return fmt.Sprintf("blockdev: inspect block %d: %s: %v", e.LBA, e.Op, e.Err)
	}
	return fmt.Sprintf("blockdev: inspect: %s: %v", e.Op, e.Err)
}

func (e *InspectError) Unwrap() error { return e.Err }

// Overview is what a store holds of a volume, beside its manifest.
type Overview struct {
	// Blocks is the volume's size in blocks; Written counts those with a
	// tuple (the others were never written, or were discarded).
	Blocks, Written int64
	// Findings counts the findings log by state; OpenByKind counts the
	// open findings by kind.
	Findings   map[store.FindingState]int64
	OpenByKind map[Kind]int64
	// Repairs are the latest repaired findings, most recent first, at
	// most MaxListedRepairs (Findings[store.FindingRepaired] counts them
	// all).
	Repairs []store.Finding
	// Mirrors are the states of the volume's copies as the store records
	// them (no legs: zero).
	Mirrors store.Mirrors
	// Scrub is the cursor of the scrub asked for, nil if it never saved
	// one (or its cursor does not read).
	Scrub *store.ScrubCursor
	// Parity is the volume's parity as the store records it, nil without.
	Parity *ParityOverview
}

// ParityOverview is the health of a volume's stripes as the store records
// it: which have parity (their checksums recorded), which do not
// (unprotected: never computed, or dropped by a write that could not
// update them), and which are under a parity intent (a session that
// crashed: the next writable open computes them again).
type ParityOverview struct {
	Config                      store.ParityConfig
	Stripes, Recorded, Dirty    int64
	BurstTolerance, ParityBytes int64 // m·D blocks; the parity file's parity blocks
}

// inspectParity returns the parity overview of t, nil without parity.
func inspectParity(ctx context.Context, t *store.Tuples) (*ParityOverview, error) {
	cfg, ok, err := t.Parity()
	if err != nil || !ok {
		return nil, err
	}
	m := t.Manifest()
	l, err := parity.NewLayout(parity.Options{Data: cfg.Data, Parity: cfg.Parity, BlockSize: m.BlockSize, Blocks: t.Blocks(), Depth: cfg.Depth})
	if err != nil {
		return nil, &store.CorruptError{Volume: t.Volume(), Record: "parity", Reason: err.Error()}
	}
	o := &ParityOverview{Config: cfg, Stripes: l.Stripes(), BurstTolerance: l.BurstTolerance(), ParityBytes: l.ParitySize()}
	for p := range l.SumPages() {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		rec, err := t.ParitySums(p)
		if errors.Is(err, store.ErrNotFound) {
			continue
		} else if err != nil {
			return nil, err
		}
		pg := l.NewSumPage(p)
		if err := pg.Decode(rec); err != nil {
			return nil, err
		}
		o.Recorded += int64(pg.Recorded())
	}
	dirty, err := t.ParityDirty()
	if err != nil {
		return nil, err
	}
	o.Dirty = int64(len(dirty))
	return o, nil
}

// Inspect returns the overview of the volume t: its coverage, counted one
// stored page at a time (the time is bounded by what the store holds, not
// by the device size), its findings, and the cursor of the scrub named
// scrub. A cancelled ctx stops it with the cancellation cause.
func Inspect(ctx context.Context, t *store.Tuples, scrub string) (*Overview, error) {
	o := &Overview{Blocks: t.Blocks(), Findings: map[store.FindingState]int64{}, OpenByKind: map[Kind]int64{}}
	w, err := t.Coverage(func() error {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, &InspectError{Op: "coverage", Err: err}
	}
	o.Written = w
	for fd, err := range t.Findings(store.FindingQuery{}) {
		if err != nil {
			return nil, &InspectError{Op: "findings", Err: err}
		}
		o.Findings[fd.State]++
		if fd.State == store.FindingOpen {
			o.OpenByKind[Kind(fd.Field)]++
		}
		if fd.State == store.FindingRepaired {
			o.Repairs = latestRepairs(o.Repairs, fd)
		}
	}
	if o.Mirrors, err = t.Mirrors(); err != nil {
		return nil, &InspectError{Op: "mirrors", Err: err}
	}
	if o.Parity, err = inspectParity(ctx, t); err != nil {
		return nil, &InspectError{Op: "parity", Err: err}
	}
	if c, err := t.ScrubCursor(scrub); err == nil {
		o.Scrub = &c
	}
	return o, nil
}

// BlockInspection is one block's protection information as stored, beside
// what its data computes.
type BlockInspection struct {
	LBA int64
	// Stored is the tuple as stored; Computed is the tuple generated from
	// the block's data with the params it is checked with: the guard
	// computed, the tags expected.
	Stored, Computed dif.Tuple
	// State is the block's state as dif classifies it, but StateUnwritten
	// for a block of a volume without a tuple, and StateFailed for one
	// failing the unwritten-data or the keyed check.
	State dif.State
	// Failed lists the kinds of the checks the block fails, in the order
	// dif checks them, then KindKeyedTag; empty, not nil, when none. A
	// block of a volume without a tuple fails only KindUnwrittenData (its
	// data is not zeros) or nothing.
	Failed []Kind
	// Written reports whether the block has a tuple: a volume's block may
	// not; an image with its own PI always has one.
	Written bool
	// Keyed is the keyed tag of a keyed volume's block, nil otherwise.
	Keyed *KeyedInspection
}

// KeyedInspection is a keyed volume's tag of one block.
type KeyedInspection struct {
	// Gen is the write generation of the tag's nonce, 0 when the block has
	// no tag; Stored is the stored tag (when Gen is not 0).
	Gen    uint64
	Stored [16]byte
	// Computed is the tag computed from the data with the key, nil
	// without the key or when there is nothing to compute.
	Computed *[16]byte
	// Check is the outcome: "ok", "mismatch", "missing" (written, no
	// tag), "unwritten" (a tag on an unwritten block), "page-mac",
	// "page-missing", or "skipped" (no key).
	Check string
	// PageMAC reports that the tag page holding the tag fails its MAC
	// (only checked with the key); PageMissing that it is missing from the
	// store (with or without the key).
	PageMAC, PageMissing bool
}

// InspectBlock returns the stored and computed tuples of one block (data
// and md in f's layout) checked with p, and its state.
func InspectBlock(f dif.Format, data, md []byte, p dif.Params) (*BlockInspection, error) {
	stored, err := f.ReadTuple(data, md, 0)
	if err != nil {
		return nil, err
	}
	// The computed tuple: generate over a copy.
	cd, cm := append([]byte(nil), data...), append([]byte(nil), md...)
	if err := f.Generate(cd, cm, p); err != nil {
		return nil, err
	}
	computed, err := f.ReadTuple(cd, cm, 0)
	if err != nil {
		return nil, err
	}
	var states [1]dif.State
	if _, err := f.Classify(&dif.Classification{States: states[:]}, data, md, p); err != nil {
		return nil, err
	}
	b := &BlockInspection{LBA: p.LBA, Stored: stored, Computed: computed, State: states[0], Failed: []Kind{}, Written: true}
	if _, err := f.VerifyFunc(data, md, p, func(e *dif.CheckError) error {
		b.Failed = append(b.Failed, KindOf(e.Field))
		return nil
	}); err != nil {
		return nil, err
	}
	return b, nil
}

// InspectStored calls fn with the inspection of each block of [lba,
// lba+n) of the volume whose tuples are t and whose data dev holds, in
// order: the tuple stored beside the one computed from the data as read
// from dev, checked with the manifest's tags. A keyed volume's tags are
// checked with vk, or, without it (nil), read and their check "skipped".
// The caller checks that [lba, lba+n) lies in the volume. It stops at the
// first error: a *InspectError, an error of dif, the cancellation cause
// of ctx, or fn's error as it is.
func InspectStored(ctx context.Context, t *store.Tuples, dev io.ReaderAt, lba, n int64, vk *VolumeKey, fn func(*BlockInspection) error) error {
	m := t.Manifest()
	f, err := dif.Parse(m.Format)
	if err != nil {
		return fmt.Errorf("blockdev: inspect: manifest format %q: %w", m.Format, err)
	}
	f = f.WithLayout(dif.Separate)
	p := dif.Params{RefTag: m.InitialRefTag, AppTag: m.AppTag, AppMask: m.AppTagMask}
	data := make([]byte, f.BlockSize())
	md := make([]byte, f.MetadataSize())
	written := store.NewBitmap(1)
	for b := lba; b < lba+n; b++ {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if _, err := dev.ReadAt(data, b*int64(f.BlockSize())); err != nil {
			return &InspectError{Op: "read", LBA: b, Err: err}
		}
		written.Clear(0)
		if _, err := t.ReadRange(b, md, nil, written); err != nil {
			return &InspectError{Op: "store", LBA: b, Err: err}
		}
		bi, err := InspectBlock(f, data, md, f.ParamsAt(p, b))
		if err != nil {
			return err
		}
		bi.LBA, bi.Written = b, written.Has(0)
		if !bi.Written {
			// An unwritten block must be zeros on the device.
			bi.State, bi.Failed = dif.StateUnwritten, []Kind{}
			if !check.IsZero(data) {
				bi.State, bi.Failed = dif.StateFailed, []Kind{KindUnwrittenData}
			}
		}
		if t.Keyed() {
			if bi.Keyed, err = inspectKeyed(t, vk, b, data, bi.Written); err != nil {
				return &InspectError{Op: "store", LBA: b, Err: err}
			}
			if c := bi.Keyed.Check; c != "ok" && c != "skipped" {
				bi.State = dif.StateFailed
				bi.Failed = append(bi.Failed, KindKeyedTag)
			}
		}
		if err := fn(bi); err != nil {
			return err
		}
	}
	return nil
}

// inspectKeyed returns the keyed tag of block lba of t (data as read,
// written per its tuple page), checked with vk when not nil.
func inspectKeyed(t *store.Tuples, vk *VolumeKey, lba int64, data []byte, written bool) (*KeyedInspection, error) {
	var tags [1]store.KeyedTag
	ki := &KeyedInspection{Check: "skipped"}
	err := t.ReadTags(lba, tags[:])
	var me *store.PageMACError
	switch {
	case errors.As(err, &me) && me.IsMissing(lba/int64(t.Manifest().PageTuples)):
		ki.PageMissing = true
	case errors.Is(err, store.ErrPageMAC):
		ki.PageMAC = true
	case err != nil:
		return nil, err
	}
	tg := tags[0]
	ki.Gen = tg.Gen
	if tg.Gen != 0 {
		ki.Stored = tg.Tag
	}
	if vk != nil {
		switch {
		case written && tg.Gen == 0:
			ki.Check = "missing"
		case !written && tg.Gen != 0:
			ki.Check = "unwritten"
		case !written:
			ki.Check = "ok"
		default:
			c, err := vk.Tag(lba, tg.Gen, data)
			if err != nil {
				return nil, err
			}
			ki.Computed = &c
			ki.Check = "ok"
			if c != ki.Stored {
				ki.Check = "mismatch"
			}
		}
	}
	if ki.PageMAC && ki.Check == "ok" {
		// The tag matches, but the page holding it is not the one the
		// key sealed: an older block may have been put back.
		ki.Check = "page-mac"
	}
	if ki.PageMissing {
		// Detected with or without the key: the page was deleted.
		ki.Check = "page-missing"
	}
	return ki, nil
}

// MaxListedRepairs bounds Overview.Repairs.
const MaxListedRepairs = 100

// latestRepairs adds f to rs, kept sorted by repair time, most recent
// first, and at most MaxListedRepairs long.
func latestRepairs(rs []store.Finding, f store.Finding) []store.Finding {
	i, _ := slices.BinarySearchFunc(rs, f, func(a, b store.Finding) int { return b.Repaired.Compare(a.Repaired) })
	if i >= MaxListedRepairs {
		return rs
	}
	rs = slices.Insert(rs, i, f)
	if len(rs) > MaxListedRepairs {
		rs = rs[:MaxListedRepairs]
	}
	return rs
}
