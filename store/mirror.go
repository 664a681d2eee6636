package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Mirror legs. A volume may keep copies of its data on other devices, its
// mirror legs (package blockdev writes every block to each; one set of
// tuples describes them all). The store keeps the list of legs and the
// state of each in one metadata record, "mirrors": its name (a path or a
// URL, as the program that opens it understands it) and, for a leg that
// missed writes, the blocks it holds stale. A volume with legs has schema
// version MirrorSchemaVersion, or, from version 7 on, the feature
// FeatureMirrorLegs, so that programs that do not write to the legs
// refuse it.

// MaxLegs bounds the mirror legs of a volume.
const MaxLegs = 3

// MaxStaleRanges bounds the stale ranges a leg records; a leg with more is
// stale as a whole (All).
const MaxStaleRanges = 4096

// StaleRange is the stale blocks [LBA, LBA+N) of a leg.
type StaleRange struct {
	LBA int64 `json:"lba"`
	N   int64 `json:"n"`
}

// Leg is a mirror leg as the store records it.
type Leg struct {
	// Name is how the leg is opened: a path or a URL.
	Name string `json:"name"`
	// Added is when the leg was added.
	Added time.Time `json:"added"`
	// All: every block of the leg may be stale (a new or replaced leg, one
	// that went offline, or one with more than MaxStaleRanges ranges).
	All bool `json:"all,omitempty"`
	// Ranges are its stale blocks, sorted and disjoint (with All, none).
	Ranges []StaleRange `json:"ranges,omitempty"`
	// StaleSince is when it first missed a write since it was last in
	// sync (zero: in sync).
	StaleSince time.Time `json:"stale_since,omitzero"`
}

// Stale reports whether the leg holds stale blocks.
func (l *Leg) Stale() bool { return l.All || len(l.Ranges) > 0 }

// StaleBlocks returns how many blocks of a volume of blocks blocks the leg
// holds stale.
func (l *Leg) StaleBlocks(blocks int64) int64 {
	if l.All {
		return blocks
	}
	var n int64
	for _, r := range l.Ranges {
		n += r.N
	}
	return n
}

// AllStale records every block of the leg stale.
func (l *Leg) AllStale(now time.Time) {
	if l.StaleSince.IsZero() {
		l.StaleSince = now.UTC()
	}
	l.All, l.Ranges = true, nil
}

// AddStale records blocks [lba, lba+n) stale: merged into Ranges, or the
// whole leg beyond MaxStaleRanges.
func (l *Leg) AddStale(lba, n int64, now time.Time) {
	if n <= 0 {
		return
	}
	if l.StaleSince.IsZero() {
		l.StaleSince = now.UTC()
	}
	if l.All {
		return
	}
	i, _ := slices.BinarySearchFunc(l.Ranges, lba, func(r StaleRange, lba int64) int {
		switch {
		case r.LBA+r.N < lba:
			return -1
		case r.LBA > lba:
			return 1
		}
		return 0
	})
	// Merge with every range that touches [lba, lba+n).
	j := i
	lo, hi := lba, lba+n
	for j < len(l.Ranges) && l.Ranges[j].LBA <= hi {
		lo, hi = min(lo, l.Ranges[j].LBA), max(hi, l.Ranges[j].LBA+l.Ranges[j].N)
		j++
	}
	l.Ranges = slices.Replace(l.Ranges, i, j, StaleRange{lo, hi - lo})
	if len(l.Ranges) > MaxStaleRanges {
		l.All, l.Ranges = true, nil
	}
}

// Mirrors are a volume's mirror legs and their states.
type Mirrors struct {
	// Primary is the state of the volume's own device (its Name is not
	// used: the device is the one the volume is opened with).
	Primary Leg `json:"primary"`
	// Legs are the mirror legs, in order: leg 1, 2, 3.
	Legs []Leg `json:"legs"`
}

func (t *Tuples) mirrorsKey() []byte { return append(recKey(t.prefix, recMeta), "mirrors"...) }

// Mirrors returns the volume's mirror legs and their states (no legs: the
// zero Mirrors).
func (t *Tuples) Mirrors() (Mirrors, error) {
	v, err := t.kv.Get(t.mirrorsKey())
	if errors.Is(err, ErrNotFound) {
		if t.m.HasFeature(FeatureMirrorLegs) {
			return Mirrors{}, &CorruptError{Volume: t.volume, Record: "mirrors", Reason: "missing in a volume with mirror legs (schema version 6, or feature mirror-legs)"}
		}
		return Mirrors{}, nil
	} else if err != nil {
		return Mirrors{}, err
	}
	var j Mirrors
	if err := decodeJSON(v, &j); err != nil {
		return Mirrors{}, &CorruptError{Volume: t.volume, Record: "mirrors", Reason: err.Error()}
	}
	if err := t.checkMirrors(j); err != nil {
		return Mirrors{}, &CorruptError{Volume: t.volume, Record: "mirrors", Reason: err.Error()}
	}
	return j, nil
}

// checkMirrors validates the legs and their states.
func (t *Tuples) checkMirrors(ms Mirrors) error {
	if err := t.checkRanges(0, ms.Primary); err != nil {
		return err
	}
	legs := ms.Legs
	if len(legs) > MaxLegs {
		return fmt.Errorf("%d mirror legs, at most %d", len(legs), MaxLegs)
	}
	for i, l := range legs {
		if l.Name == "" || len(l.Name) > maxNameLen {
			return fmt.Errorf("leg %d: name of %d bytes", i+1, len(l.Name))
		}
		if err := t.checkRanges(i+1, l); err != nil {
			return err
		}
		for _, o := range legs[:i] {
			if o.Name == l.Name {
				return fmt.Errorf("leg %d: %q is leg %d already", i+1, l.Name, slices.IndexFunc(legs, func(x Leg) bool { return x.Name == l.Name })+1)
			}
		}
	}
	return nil
}

// checkRanges validates the stale ranges of leg i.
func (t *Tuples) checkRanges(i int, l Leg) error {
	if l.All && len(l.Ranges) > 0 || len(l.Ranges) > MaxStaleRanges {
		return fmt.Errorf("leg %d: %d stale ranges (all %v)", i, len(l.Ranges), l.All)
	}
	end := int64(-1)
	for _, r := range l.Ranges {
		if r.N <= 0 || r.LBA <= end || r.LBA < 0 || r.N > t.blocks-r.LBA {
			return fmt.Errorf("leg %d: stale range [%d, +%d) out of order or out of the volume's %d blocks", i, r.LBA, r.N, t.blocks)
		}
		end = r.LBA + r.N
	}
	return nil
}

// SetMirrors replaces the volume's mirror legs and their states, and
// marks the manifest: a volume of schema version 7 or later gets the
// feature FeatureMirrorLegs with legs and loses it without; an older one
// gets version MirrorSchemaVersion with legs and its own without. Without
// legs the states are dropped.
func (t *Tuples) SetMirrors(ms Mirrors, sync bool) error {
	if err := t.checkMirrors(ms); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	legs := ms.Legs
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.kv.NewBatch()
	defer b.Close()
	m := t.m
	m.Features = slices.DeleteFunc(slices.Clone(m.Features), func(f string) bool { return f == FeatureMirrorLegs })
	if len(legs) > 0 {
		if m.Schema >= RunsSchemaVersion {
			m.Features = append(m.Features, FeatureMirrorLegs)
		} else {
			m.Schema = MirrorSchemaVersion
		}
		v, err := json.Marshal(ms)
		if err != nil {
			return fmt.Errorf("store: %v", err)
		}
		if err := b.Set(t.mirrorsKey(), v); err != nil {
			return err
		}
	} else {
		if m.Schema < RunsSchemaVersion {
			m.Schema = m.legacySchema()
		}
		if err := b.Delete(t.mirrorsKey()); err != nil {
			return err
		}
	}
	if len(m.Features) == 0 {
		m.Features = nil
	}
	if m.Schema != t.m.Schema || !slices.Equal(m.Features, t.m.Features) {
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
	t.m.Schema, t.m.Features = m.Schema, m.Features
	return nil
}
