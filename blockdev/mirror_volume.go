package blockdev

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/store"
)

// The mirror legs of a Volume: opened at Open (openLegs), added and
// removed (AddMirror, RemoveMirror), listed (Legs). See mirror.go.

// legName is how problems and findings name leg l of the volume.
func legName(i int, name string) string {
	if i == 0 {
		return "leg 0 (the volume's device)"
	}
	return "leg " + strconv.Itoa(i) + " (" + name + ")"
}

// openLegs opens the volume's mirror legs (Open): each through
// Options.OpenLeg, checked for its size and, unless it is stale as a
// whole, for holding this volume's data (SampleData), and wraps the
// volume's device with them. A leg that does not open, or has the wrong
// size (a truncated file), goes offline, its *LegError in Legs (and, on a
// volume that can write, stale as a whole, recorded at once): the volume
// works on the others. A leg holding another volume's data fails Open
// with a *LegError matching ErrForeignLeg: it must never be written.
func (v *Volume) openLegs(ctx context.Context) error {
	ms, err := v.tup.Mirrors()
	if err != nil {
		return fmt.Errorf("blockdev: open volume %q: %w", v.opts.Name, err)
	}
	if len(ms.Legs) == 0 {
		return nil
	}
	md := v.newMirrorDev(ms)
	for k, rec := range ms.Legs {
		l := &mleg{i: k + 1, name: rec.Name, rec: rec}
		l.stale.Store(rec.Stale())
		md.legs = append(md.legs, l)
		var dev device.Device
		err := ErrLegOffline
		if v.opts.OpenLeg != nil {
			dev, err = v.opts.OpenLeg(rec.Name)
		}
		if err == nil {
			l.dev, l.owned = dev, true
			err = v.checkLeg(ctx, l)
			if errors.Is(err, ErrForeignLeg) {
				md.closeOwned()
				return err
			}
		}
		if err != nil {
			if l.dev != nil {
				l.dev.Close()
				l.dev = nil
			}
			l.offline.Store(true)
			if l.err = err; !errors.As(err, new(*LegError)) {
				l.err = &LegError{Leg: l.i, Name: l.name, Err: err}
			}
			if !v.opts.ReadOnly {
				l.rec.AllStale(time.Now())
				l.stale.Store(true)
				md.dirty = true
			}
		}
	}
	v.useMirrors(md)
	if err := md.persistStates(); err != nil {
		md.closeOwned()
		return err
	}
	return nil
}

// newMirrorDev returns the mirror device of the volume with legs states
// ms, holding leg 0 (the volume's device) only.
func (v *Volume) newMirrorDev(ms store.Mirrors) *mirrorDev {
	md := &mirrorDev{size: v.dev.Size(), bs: v.bs, blocks: v.blocks,
		lbs: v.dev.LogicalBlockSize(), pbs: v.dev.PhysicalBlockSize(),
		persist: func(ms store.Mirrors) error { return v.tup.SetMirrors(ms, true) }}
	l0 := &mleg{i: 0, dev: v.dev, rec: ms.Primary}
	l0.stale.Store(ms.Primary.Stale())
	md.legs = []*mleg{l0}
	return md
}

// checkLeg checks a mirror leg's size and block size and, unless it is
// stale as a whole, that a sample of its blocks verifies.
func (v *Volume) checkLeg(ctx context.Context, l *mleg) error {
	mismatch := func(field, stored, given string) error {
		return &LegError{Leg: l.i, Name: l.name, Err: &MismatchError{Volume: v.opts.Name, Field: field, Stored: stored, Given: given}}
	}
	switch {
	case l.dev.Size() != v.Size():
		return mismatch("size of mirror leg "+strconv.Itoa(l.i), strconv.FormatInt(v.Size(), 10), strconv.FormatInt(l.dev.Size(), 10))
	case v.bs%l.dev.LogicalBlockSize() != 0:
		return mismatch("block size", strconv.Itoa(v.bs), "not a multiple of mirror leg "+strconv.Itoa(l.i)+"'s "+strconv.Itoa(l.dev.LogicalBlockSize())+"-byte logical blocks")
	}
	if l.rec.All {
		return nil
	}
	s, err := SampleData(ctx, v.tup, l.dev, l.dev.Size())
	if err != nil {
		return err
	}
	if s.Foreign() {
		return &LegError{Leg: l.i, Name: l.name, Err: fmt.Errorf("%w: all %d blocks sampled fail their tuples", ErrForeignLeg, s.Checked)}
	}
	return nil
}

// useMirrors makes md the volume's device. The volume must be quiet (Open,
// or AddMirror under closeMu and flushMu).
func (v *Volume) useMirrors(md *mirrorDev) {
	for _, l := range md.legs {
		if l.dev != nil {
			md.lbs = max(md.lbs, l.dev.LogicalBlockSize())
			md.pbs = max(md.pbs, l.dev.PhysicalBlockSize())
		}
	}
	v.mirror = md
	v.dev = md
	v.stg.dev = md
	if !v.opts.NoMap {
		v.mapper = md
		v.noMap.Store(false)
	}
}

// closeOwned closes the legs the volume opened.
func (m *mirrorDev) closeOwned() {
	for _, l := range m.legs {
		if l.owned && l.dev != nil {
			l.dev.Close()
		}
	}
}

// repairLegs appends to dst the copies a repair reads and writes: the
// online legs of a mirrored volume, or the volume's device.
func (v *Volume) repairLegs(dst []repairLeg) []repairLeg {
	if v.mirror == nil {
		return append(dst, repairLeg{dev: v.dev, leg: 0, name: "the volume's device"})
	}
	for _, l := range v.mirror.online() {
		dst = append(dst, repairLeg{dev: l.dev, leg: l.i, name: legName(l.i, l.name), ml: l})
	}
	return dst
}

// legFailed takes leg l (of a repair) offline after err.
func (v *Volume) legFailed(l repairLeg, lba int64, err error) {
	if l.ml != nil {
		v.mirror.failed(l.ml, lba, 1, err)
	}
}

// Legs returns the state of every copy of a mirrored volume's data: leg 0,
// the volume's device, then the mirror legs. A volume without mirror legs
// returns nil.
func (v *Volume) Legs() []LegStatus {
	md := v.mirror
	if md == nil {
		return nil
	}
	md.mu.RLock()
	defer md.mu.RUnlock()
	out := make([]LegStatus, 0, len(md.legs))
	for _, l := range md.legs {
		out = append(out, LegStatus{Leg: l.i, Name: l.name, Online: !l.offline.Load(),
			StaleBlocks: l.rec.StaleBlocks(v.blocks), All: l.rec.All, StaleSince: l.rec.StaleSince, Err: l.err})
	}
	return out
}

// quiesce runs fn with the volume quiet: no operation in flight, the
// staged writes written out and synced.
func (v *Volume) quiesce(fn func() error) error {
	v.closeMu.Lock()
	defer v.closeMu.Unlock()
	if v.closed {
		return device.ErrClosed
	}
	if err := v.failed(); err != nil {
		return err
	}
	v.stg.flushMu.Lock()
	defer v.stg.flushMu.Unlock()
	if err := v.stg.syncLocked(); err != nil {
		return err
	}
	return fn()
}

// AddMirror adds m as a mirror leg of the volume: its size must be the
// volume's, and at most store.MaxLegs legs are kept. The leg is recorded
// stale as a whole (synced) and written with every write from now on;
// Resync copies the volume's data to it. The volume does not close m.Dev.
func (v *Volume) AddMirror(m Mirror) error {
	if v.opts.ReadOnly {
		return fmt.Errorf("blockdev: add mirror: %w", device.ErrReadOnly)
	}
	if err := v.keyedWritable("add mirror"); err != nil {
		return err
	}
	if m.Dev == nil || m.Name == "" {
		return errors.New("blockdev: add mirror: no device or no name")
	}
	return v.quiesce(func() error {
		md := v.mirror
		if md == nil {
			md = v.newMirrorDev(store.Mirrors{})
		}
		if len(md.legs) > store.MaxLegs {
			return fmt.Errorf("blockdev: add mirror %s: the volume has %d mirror legs already, at most %d", m.Name, len(md.legs)-1, store.MaxLegs)
		}
		for _, l := range md.legs[1:] {
			if l.name == m.Name {
				return fmt.Errorf("blockdev: add mirror %s: it is leg %d already", m.Name, l.i)
			}
		}
		l := &mleg{i: len(md.legs), name: m.Name, dev: m.Dev, rec: store.Leg{Name: m.Name, Added: time.Now().UTC()}}
		if err := v.checkLeg(context.Background(), &mleg{i: l.i, name: l.name, dev: l.dev, rec: store.Leg{All: true}}); err != nil {
			return err
		}
		l.rec.AllStale(time.Now())
		l.stale.Store(true)
		md.mu.Lock()
		md.legs = append(md.legs, l)
		ms := md.states()
		md.mu.Unlock()
		if err := v.tup.SetMirrors(ms, true); err != nil {
			md.legs = md.legs[:len(md.legs)-1]
			return fmt.Errorf("blockdev: add mirror %s: %w", m.Name, err)
		}
		if v.mirror == nil {
			v.useMirrors(md)
		} else {
			md.lbs = max(md.lbs, m.Dev.LogicalBlockSize())
			md.pbs = max(md.pbs, m.Dev.PhysicalBlockSize())
		}
		return nil
	})
}

// RemoveMirror removes mirror leg leg (1 to the number of legs) from the
// volume; later legs move down by one. The last leg removed, the volume's
// device is used alone again. Removing the only leg holding the data
// fresh is refused: leg 0 must not be stale. A leg the volume opened
// (Options.OpenLeg) is closed.
func (v *Volume) RemoveMirror(leg int) error {
	if v.opts.ReadOnly {
		return fmt.Errorf("blockdev: remove mirror: %w", device.ErrReadOnly)
	}
	return v.quiesce(func() error {
		md := v.mirror
		if md == nil || leg < 1 || leg >= len(md.legs) {
			return fmt.Errorf("blockdev: remove mirror: no leg %d", leg)
		}
		if md.legs[0].stale.Load() || md.legs[0].offline.Load() {
			return fmt.Errorf("blockdev: remove mirror %d: the volume's device is stale or offline; resync it first", leg)
		}
		md.mu.Lock()
		gone := md.legs[leg]
		legs := slices.Delete(slices.Clone(md.legs), leg, leg+1)
		for k, l := range legs {
			l.i = k
		}
		old := md.legs
		md.legs = legs
		ms := md.states()
		md.mu.Unlock()
		if len(legs) == 1 {
			ms = store.Mirrors{}
		}
		if err := v.tup.SetMirrors(ms, true); err != nil {
			md.mu.Lock()
			md.legs = old
			for k, l := range old {
				l.i = k
			}
			md.mu.Unlock()
			return fmt.Errorf("blockdev: remove mirror %d: %w", leg, err)
		}
		if gone.owned && gone.dev != nil {
			gone.dev.Close()
		}
		if len(legs) == 1 {
			v.mirror = nil
			v.dev = legs[0].dev
			v.stg.dev = v.dev
			v.mapper = nil
			if m, ok := v.dev.(device.Mapper); ok && !v.opts.NoMap {
				v.mapper = m
			}
			v.noMap.Store(false)
		}
		return nil
	})
}

// closeLegs closes the mirror legs the volume opened.
func (v *Volume) closeLegs() {
	if v.mirror != nil {
		v.mirror.closeOwned()
	}
}
