package blockdev

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/store"
)

// Mirror legs. A volume may keep 1 to store.MaxLegs more copies of its
// data on other devices: image files, block devices, NBD exports. One set
// of tuples describes them all; the store records the legs (by name, for
// Options.OpenLeg to open) and the state of each copy, the volume's own
// device (leg 0) included (store.Mirrors).
//
// The legs are one device to the rest of the volume, mirrorDev:
//
//   - a write goes to every online leg in parallel, and succeeds if one
//     leg took it. A leg whose write fails goes offline (it is written no
//     more, and not read) and records the blocks of that write and of
//     every later one as stale;
//   - Sync syncs every online leg, then, if a leg turned stale since the
//     last Sync, records the states in the store with a synced commit,
//     before the volume commits the tuples of the writes it makes durable:
//     no acknowledged write is ever missing from a leg without that leg
//     saying so durably;
//   - a read takes one leg that holds the blocks fresh (online, and none
//     of them stale), chosen by the offset's MiB so that large reads
//     spread over the legs and a block is always read from the same leg.
//
// A failing block is repaired by the repair stage (read_repair.go) from
// any leg whose copy verifies; crash recovery (recover.go) decides each
// block under an open intent from any leg that matches a tuple and writes
// that copy to the legs that differ; Resync (mirror_resync.go) brings a
// stale leg back.

// Mirror is a mirror leg given to AddMirror: its device, and the name the
// store records for Options.OpenLeg.
type Mirror struct {
	Name string
	Dev  device.Device
}

var (
	// ErrForeignLeg reports a mirror leg whose data is another volume's:
	// a sample of its blocks all fail their tuples. It is never written.
	ErrForeignLeg = errors.New("blockdev: mirror leg holds another volume's data")
	// ErrLegOffline is the cause of a leg the volume no longer writes:
	// not opened, or failed.
	ErrLegOffline = errors.New("blockdev: mirror leg offline")
)

// LegError reports a mirror leg that cannot be used: the wrong size, or
// another volume's data (refused at Open), or why it went offline.
type LegError struct {
	Leg  int // 1 to store.MaxLegs; 0 is the volume's device
	Name string
	Err  error
}

func (e *LegError) Error() string {
	if e.Leg == 0 {
		return fmt.Sprintf("blockdev: the volume's device: %v", e.Err)
	}
	return fmt.Sprintf("blockdev: mirror leg %d (%s): %v", e.Leg, e.Name, e.Err)
}

func (e *LegError) Unwrap() error { return e.Err }

// LegStatus is the state of one copy of a mirrored volume's data.
type LegStatus struct {
	Leg  int    // 0: the volume's device; 1 to store.MaxLegs: the mirror legs
	Name string // as the store records it ("" for leg 0)
	// Online: opened, and written with every write.
	Online bool
	// StaleBlocks counts the blocks the leg may hold stale (All: every
	// block: a new or replaced leg, or one that went offline); StaleSince
	// is when it first missed a write.
	StaleBlocks int64
	All         bool
	StaleSince  time.Time
	// Err is why the leg is offline.
	Err error
}

// mleg is one copy of a mirrored volume's data.
type mleg struct {
	i     int
	name  string
	dev   device.Device
	owned bool // opened through Options.OpenLeg: closed with the volume

	offline atomic.Bool // written no more, not read
	stale   atomic.Bool // rec.Stale(): read only outside its stale ranges

	// Under mirrorDev.mu.
	rec store.Leg
	err error
}

// mirrorDev is the volume's device when it has mirror legs (see above).
type mirrorDev struct {
	legs   []*mleg // legs[0] is the volume's own device
	size   int64
	bs     int // the volume's block size
	lbs    int
	pbs    int
	blocks int64

	mu      sync.RWMutex // guards the legs' rec and err, and dirty
	dirty   bool         // a leg's state changed since it was last persisted
	persist func(store.Mirrors) error
}

var (
	_ device.Device       = (*mirrorDev)(nil)
	_ device.Mapper       = (*mirrorDev)(nil)
	_ device.Discarder    = (*mirrorDev)(nil)
	_ device.DataFinder   = (*mirrorDev)(nil)
	_ device.CacheDropper = (*mirrorDev)(nil)
	_ device.DirectReader = (*mirrorDev)(nil)
)

// mirrorPiece is the unit by which reads are spread over the legs.
const mirrorPiece = 1 << 20

func (m *mirrorDev) Size() int64            { return m.size }
func (m *mirrorDev) LogicalBlockSize() int  { return m.lbs }
func (m *mirrorDev) PhysicalBlockSize() int { return m.pbs }

// Close does nothing: the volume closes the legs it opened (closeLegs).
func (m *mirrorDev) Close() error { return nil }

// states returns the legs' states as the store records them. Caller holds
// m.mu.
func (m *mirrorDev) states() store.Mirrors {
	ms := store.Mirrors{Primary: m.legs[0].rec}
	for _, l := range m.legs[1:] {
		r := l.rec
		r.Ranges = slices.Clone(r.Ranges)
		ms.Legs = append(ms.Legs, r)
	}
	ms.Primary.Ranges = slices.Clone(ms.Primary.Ranges)
	return ms
}

// online returns the legs that are written.
func (m *mirrorDev) online() []*mleg {
	out := make([]*mleg, 0, len(m.legs))
	for _, l := range m.legs {
		if !l.offline.Load() {
			out = append(out, l)
		}
	}
	return out
}

// fresh reports whether leg l holds the bytes [off, off+n) fresh: online,
// and none of their blocks stale.
func (m *mirrorDev) fresh(l *mleg, off, n int64) bool {
	if l.offline.Load() {
		return false
	}
	if !l.stale.Load() {
		return true
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if l.rec.All {
		return false
	}
	lo, hi := off/int64(m.bs), (off+n+int64(m.bs)-1)/int64(m.bs)
	for _, r := range l.rec.Ranges {
		if r.LBA < hi && r.LBA+r.N > lo {
			return false
		}
	}
	return true
}

// staleAt reports whether leg l holds block lba stale.
func (m *mirrorDev) staleAt(l *mleg, lba int64) bool {
	if !l.stale.Load() {
		return false
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if l.rec.All {
		return true
	}
	_, found := slices.BinarySearchFunc(l.rec.Ranges, lba, func(r store.StaleRange, lba int64) int {
		switch {
		case r.LBA+r.N <= lba:
			return -1
		case r.LBA > lba:
			return 1
		}
		return 0
	})
	return found
}

// reader returns the leg to read [off, off+n) from: a fresh one, chosen
// by the offset's MiB among them; an online one if none is fresh; nil if
// every leg is offline. ok filters the legs (nil: any).
func (m *mirrorDev) reader(off, n int64, ok func(*mleg) bool) *mleg {
	k := len(m.legs)
	start := int(off/mirrorPiece) % k
	var any *mleg
	for j := range k {
		l := m.legs[(start+j)%k]
		if ok != nil && !ok(l) || l.offline.Load() {
			continue
		}
		if m.fresh(l, off, n) {
			return l
		}
		if any == nil {
			any = l
		}
	}
	return any
}

// failed takes leg l offline after err, recording blocks [lba, lba+n)
// stale (n 0: none more; all of them: the whole leg).
func (m *mirrorDev) failed(l *mleg, lba, n int64, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !l.offline.Swap(true) {
		l.err = err
	}
	if lba == 0 && n >= m.blocks {
		l.rec.AllStale(time.Now())
	}
	l.rec.AddStale(lba, n, time.Now())
	l.stale.Store(l.rec.Stale())
	m.dirty = true
}

// markStale records blocks [lba, lba+n) stale on leg l, which stays
// online.
func (m *mirrorDev) markStale(l *mleg, lba, n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l.rec.AddStale(lba, n, time.Now())
	l.stale.Store(true)
	m.dirty = true
}

// missed records the blocks [off, off+n) stale on every offline leg, which
// a write or discard skipped.
func (m *mirrorDev) missed(off, n int64) {
	lba, end := off/int64(m.bs), (off+n+int64(m.bs)-1)/int64(m.bs)
	for _, l := range m.legs {
		if l.offline.Load() {
			m.mu.Lock()
			l.rec.AddStale(lba, end-lba, time.Now())
			l.stale.Store(true)
			m.dirty = true
			m.mu.Unlock()
		}
	}
}

// each runs fn on every online leg, in parallel, and takes the legs it
// fails on offline with the blocks [off, off+n) stale. It fails only if
// every leg failed (or none is online), with the first leg's error.
func (m *mirrorDev) each(off, n int64, fn func(l *mleg) error) error {
	legs := m.online()
	if len(legs) == 0 {
		return fmt.Errorf("blockdev: every copy of the mirrored volume is offline: %w", ErrLegOffline)
	}
	errs := make([]error, len(legs))
	if len(legs) == 1 {
		errs[0] = fn(legs[0])
	} else {
		var wg sync.WaitGroup
		for k := 1; k < len(legs); k++ {
			wg.Go(func() { errs[k] = fn(legs[k]) })
		}
		errs[0] = fn(legs[0])
		wg.Wait()
	}
	lba, end := off/int64(m.bs), (off+n+int64(m.bs)-1)/int64(m.bs)
	ok := 0
	for k, err := range errs {
		if err == nil {
			ok++
			continue
		}
		if errors.Is(err, device.ErrOutOfRange) || errors.Is(err, device.ErrUnaligned) {
			// The request's fault, not the leg's.
			return err
		}
		m.failed(legs[k], lba, end-lba, err)
	}
	m.missed(off, n)
	if ok == 0 {
		return fmt.Errorf("blockdev: every copy of the mirrored volume failed: %w", errs[0])
	}
	return nil
}

// WriteAt writes p to every online leg.
func (m *mirrorDev) WriteAt(p []byte, off int64) (int, error) {
	err := m.each(off, int64(len(p)), func(l *mleg) error {
		_, err := l.dev.WriteAt(p, off)
		return err
	})
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// Discard discards [off, off+n) on every online leg (writing zeros where
// a leg cannot discard).
func (m *mirrorDev) Discard(off, n int64) error {
	return m.each(off, n, func(l *mleg) error { return zeroRange(l.dev, off, n) })
}

// zeroRange makes dev's bytes [off, off+n) read as zeros: a discard where
// the device can, otherwise writes of zeros.
func zeroRange(dev device.Device, off, n int64) error {
	if d, ok := dev.(device.Discarder); ok {
		err := d.Discard(off, n)
		if err == nil || !errors.Is(err, errors.ErrUnsupported) {
			return err
		}
	}
	buf := device.AlignedBuffer(int(min(n, 1<<20)))
	for pos := off; pos < off+n; {
		k := min(int64(len(buf)), off+n-pos)
		if _, err := dev.WriteAt(buf[:k], pos); err != nil {
			return err
		}
		pos += k
	}
	return nil
}

// Sync syncs every online leg, then persists the legs' states if they
// changed (see the top of the file).
func (m *mirrorDev) Sync() error {
	legs := m.online()
	if len(legs) == 0 {
		return fmt.Errorf("blockdev: every copy of the mirrored volume is offline: %w", ErrLegOffline)
	}
	errs := make([]error, len(legs))
	var wg sync.WaitGroup
	for k, l := range legs {
		wg.Go(func() { errs[k] = l.dev.Sync() })
	}
	wg.Wait()
	ok := 0
	for k, err := range errs {
		if err == nil {
			ok++
			continue
		}
		// Which writes reached the leg is unknown: all of it is stale.
		m.failed(legs[k], 0, m.blocks, err)
	}
	if err := m.persistStates(); err != nil {
		return err
	}
	if ok == 0 {
		return fmt.Errorf("blockdev: every copy of the mirrored volume failed to sync: %w", errs[0])
	}
	return nil
}

// persistStates records the legs' states in the store, synced, if they
// changed since they were last recorded.
func (m *mirrorDev) persistStates() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dirty {
		return nil
	}
	if err := m.persist(m.states()); err != nil {
		return fmt.Errorf("blockdev: recording the mirror legs' states: %w", err)
	}
	m.dirty = false
	return nil
}

// ReadAt reads from one leg that holds the bytes fresh.
func (m *mirrorDev) ReadAt(p []byte, off int64) (int, error) {
	return m.read(p, off, func(l *mleg) (int, error) { return l.dev.ReadAt(p, off) })
}

// ReadAtDirect reads around the page cache from one leg.
func (m *mirrorDev) ReadAtDirect(p []byte, off int64) (int, error) {
	return m.read(p, off, func(l *mleg) (int, error) { return device.ReadUncached(l.dev, p, off) })
}

// read reads p at off with fn from one leg (reader). A leg that is gone
// (closed, or its connection lost: an error matching device.ErrClosed)
// goes offline, and the read is taken from another; any other error is
// the read's, for the verifier to report (and the repair stage to mend).
func (m *mirrorDev) read(p []byte, off int64, fn func(*mleg) (int, error)) (int, error) {
	for {
		l := m.reader(off, int64(len(p)), nil)
		if l == nil {
			return 0, fmt.Errorf("blockdev: every copy of the mirrored volume is offline: %w", ErrLegOffline)
		}
		n, err := fn(l)
		if err == nil || !errors.Is(err, device.ErrClosed) || l.i == 0 && len(m.online()) == 1 {
			return n, err
		}
		m.failed(l, 0, 0, err)
	}
}

// ReadMapped lends the bytes from the mapping of one leg that can map
// them.
func (m *mirrorDev) ReadMapped(off int64, n int, fn func([]byte) error) error {
	l := m.reader(off, int64(n), func(l *mleg) bool { _, ok := l.dev.(device.Mapper); return ok })
	if l == nil {
		return fmt.Errorf("blockdev: no leg of the mirrored volume can be mapped: %w", errors.ErrUnsupported)
	}
	return l.dev.(device.Mapper).ReadMapped(off, n, fn)
}

// NextData answers from the leg a read at off takes.
func (m *mirrorDev) NextData(off int64) (device.Extent, error) {
	l := m.reader(off, int64(m.bs), nil)
	if l == nil {
		return device.Extent{}, fmt.Errorf("blockdev: mirrored volume offline: %w", errors.ErrUnsupported)
	}
	f, ok := l.dev.(device.DataFinder)
	if !ok {
		return device.Extent{}, errors.ErrUnsupported
	}
	return f.NextData(off)
}

// DropCache drops the cached pages of every online leg.
func (m *mirrorDev) DropCache(off, n int64) error {
	for _, l := range m.online() {
		if cd, ok := l.dev.(device.CacheDropper); ok {
			if err := cd.DropCache(off, n); err != nil && !errors.Is(err, errors.ErrUnsupported) {
				return err
			}
		}
	}
	return nil
}
