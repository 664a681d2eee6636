// Package faultdev owns the fault-injecting device that difctl's tests put
// under a Volume, a store or a server: a [Device] wraps any
// [device.Device] and flips bits, tears, drops and misdirects writes, fails
// chosen ranges with EIO transiently or permanently, numbers every
// state-changing request, and simulates a crash that loses every write not
// covered by a completed Sync (optionally keeping a seeded random subset of
// unsynced sectors, which models page-cache writeback and torn writes).
// [Device.Reopen] then yields the device as found after the crash.
//
// Like Pebble's vfs/errorfs, it is a package of its own so that production
// code never links it. It builds on package blockdev/device, not on
// blockdev itself, so that blockdev's internal tests can import it without
// an import cycle; any device.Device can be wrapped, and the result is a
// device.Device.
package faultdev

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"syscall"

	"github.com/difctl/difctl/blockdev/device"
)

// Kind selects what a [Fault] does.
type Kind int

const (
	// FailRead makes matching reads fail with an *[device.IOError] (EIO by
	// default); nothing is returned.
	FailRead Kind = iota + 1
	// FailWrite makes matching writes and discards fail with an *[device.IOError]
	// (EIO by default); nothing reaches the device.
	FailWrite
	// FailSync makes Sync fail with an *[device.IOError] (EIO by default); unsynced
	// writes stay unsynced.
	FailSync
	// DropWrite silently loses matching writes: they report success and
	// nothing reaches the device.
	DropWrite
	// TearWrite lets only the first Keep bytes of matching writes reach the
	// device and reports success.
	TearWrite
	// MisdirectWrite makes matching writes land at Target instead of their
	// offset (clipped to the device) and reports success.
	MisdirectWrite
	// CorruptRead makes matching reads return data with bit Bit flipped,
	// leaving the device intact.
	CorruptRead
)

var kindNames = [...]string{"", "fail-read", "fail-write", "fail-sync", "drop-write", "tear-write", "misdirect-write", "corrupt-read"}

func (k Kind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

func (k Kind) isWrite() bool {
	return k == FailWrite || k == DropWrite || k == TearWrite || k == MisdirectWrite
}

// A Fault is a scripted misbehaviour of a [Device].
type Fault struct {
	Kind Kind
	// Off and Len select the requests the fault applies to: those that
	// overlap [Off, Off+Len). Len 0 means the whole device. FailSync and
	// CorruptRead ignore them.
	Off, Len int64
	// After lets the first After matching requests through untouched.
	After int
	// Times is how many matching requests the fault then affects; 0 means
	// every one (a permanent fault).
	Times int
	// Err is the cause reported by FailRead, FailWrite and FailSync inside
	// an *[device.IOError]. Default: syscall.EIO.
	Err error
	// Keep is, for TearWrite, the number of leading bytes of the write that
	// reach the device: a multiple of 512, so that tearing happens at
	// sector granularity (also inside a block larger than 512 bytes).
	Keep int64
	// Target is, for MisdirectWrite, the offset where the write lands.
	Target int64
	// Bit is, for CorruptRead, the device-absolute position (byte offset*8 +
	// bit, bit 0 the least significant) of the bit flipped in every
	// matching read, that is every read covering byte Bit/8.
	Bit int64
}

type faultRule struct {
	Fault
	seen, hits int
	removed    bool
}

// matches reports whether a request [off, off+n) is selected by the rule.
func (r *faultRule) matches(off, n int64) bool {
	if r.Kind == FailSync {
		return true
	}
	if r.Kind == CorruptRead {
		b := r.Bit / 8
		return off <= b && b < off+n
	}
	if r.Len == 0 {
		return true
	}
	return off < r.Off+r.Len && r.Off < off+n
}

// Options configures a [Device].
type Options struct {
	// Sector is the unit in which unsynced data survives or is lost in a
	// simulated crash: a power of two of at least 512 that divides the
	// logical block size. Smaller than the block size, it models sub-block
	// tearing. Default: the logical block size.
	Sector int
}

// A Step is a state-changing request (write, sync or discard) about to be
// performed by a [Device], numbered from 0 in the order they start.
type Step struct {
	N   int64
	Op  string // "write", "sync" or "discard"
	Off int64
	Len int64
}

// CrashOptions say which unsynced data survives a simulated crash.
//
// For every sector written since the last completed Sync, the medium holds
// after the crash either the sector as of that Sync or the sector as some
// later write left it, as if the page cache had written back some versions
// of it in the order they were written. Each write's version of each sector
// it touched is kept or not independently, which tears writes at sector
// granularity.
type CrashOptions struct {
	// Keep is the probability that a write's version of a sector reached
	// the medium. Default 0: every write since the last Sync is lost.
	Keep float64
	// Seed seeds the random choices, which are deterministic for a given
	// seed and history.
	Seed uint64
	// KeepFunc, if not nil, decides instead of Keep and Seed: write is the
	// index of the write since the last completed Sync (0 for the first)
	// and off the offset of the sector.
	KeepFunc func(write int, off int64) bool
}

// Device wraps a [device.Device] for tests: it injects scripted faults and
// simulates crashes. It is deterministic: the same requests in the same
// order give the same results.
//
// It records every write since the last completed Sync together with the
// synced contents it overwrote; [Device.Crash] rolls the wrapped device
// back accordingly (memory use is proportional to unsynced data). Requests
// that change state (writes, syncs, discards) are numbered [Step]s, so a
// test can crash at every step with [Device.CrashAt]. State-changing
// requests are serialized; reads run concurrently.
//
// Closing a Device does not close the wrapped device, which belongs to
// the caller; [Device.Reopen] returns a fresh Device over it after
// a crash or a close.
type Device struct {
	dev    device.Device
	sector int

	mu       sync.Mutex
	rules    []*faultRule
	steps    int64
	crashAt  int64 // -1: none armed
	crashOpt CrashOptions
	hook     func(Step) error
	crashed  bool
	closed   bool
	base     map[int64][]byte // sector index -> contents as of the last completed Sync
	log      []pending        // writes since the last completed Sync, in order
}

type pending struct {
	off  int64
	data []byte
}

var (
	_ device.Device       = (*Device)(nil)
	_ device.Discarder    = (*Device)(nil)
	_ device.DataFinder   = (*Device)(nil)
	_ device.CacheDropper = (*Device)(nil)
)

// New wraps dev.
func New(dev device.Device, opts Options) (*Device, error) {
	lbs := dev.LogicalBlockSize()
	s := opts.Sector
	if s == 0 {
		s = lbs
	}
	if s < 512 || s&(s-1) != 0 || lbs%s != 0 {
		return nil, fmt.Errorf("faultdev: fault device sector size %d does not divide the %d-byte block size", s, lbs)
	}
	return &Device{dev: dev, sector: s, crashAt: -1, base: make(map[int64][]byte)}, nil
}

// Size implements [device.Device].
func (d *Device) Size() int64 { return d.dev.Size() }

// LogicalBlockSize implements [device.Device].
func (d *Device) LogicalBlockSize() int { return d.dev.LogicalBlockSize() }

// PhysicalBlockSize implements [device.Device].
func (d *Device) PhysicalBlockSize() int { return d.dev.PhysicalBlockSize() }

// Inject adds a fault and returns its id for [Device.Hits]. When
// several faults match a request, the first one injected that fires
// applies; every matching fault counts the request towards its After.
func (d *Device) Inject(f Fault) (int, error) {
	switch {
	case f.Kind < FailRead || f.Kind > CorruptRead:
		return 0, fmt.Errorf("faultdev: unknown fault kind %d", int(f.Kind))
	case f.Off < 0 || f.Len < 0 || f.After < 0 || f.Times < 0:
		return 0, fmt.Errorf("faultdev: fault %v: negative offset, length or count", f.Kind)
	case f.Kind == TearWrite && (f.Keep < 0 || f.Keep%512 != 0):
		return 0, fmt.Errorf("faultdev: torn write keeps %d bytes, not a multiple of 512", f.Keep)
	case f.Kind == MisdirectWrite && (f.Target < 0 || f.Target >= d.Size()):
		return 0, fmt.Errorf("faultdev: misdirected write target %d: %w", f.Target, device.ErrOutOfRange)
	case f.Kind == CorruptRead && (f.Bit < 0 || f.Bit/8 >= d.Size()):
		return 0, fmt.Errorf("faultdev: corrupt bit %d: %w", f.Bit, device.ErrOutOfRange)
	}
	if f.Err == nil {
		f.Err = syscall.EIO
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.rules = append(d.rules, &faultRule{Fault: f})
	return len(d.rules) - 1, nil
}

// Hits returns how many requests the fault with the given id has affected.
func (d *Device) Hits(id int) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if id < 0 || id >= len(d.rules) {
		return 0
	}
	return d.rules[id].hits
}

// ClearFaults removes every injected fault (ids are not reused).
func (d *Device) ClearFaults() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range d.rules {
		r.removed = true
	}
}

// fire returns the fault that applies to a request of the given kind class,
// or nil. Caller holds d.mu.
func (d *Device) fire(class func(Kind) bool, off, n int64) *faultRule {
	var hit *faultRule
	for _, r := range d.rules {
		if r.removed || !class(r.Kind) || !r.matches(off, n) {
			continue
		}
		r.seen++
		if hit == nil && r.seen > r.After && (r.Times == 0 || r.hits < r.Times) {
			r.hits++
			hit = r
		}
	}
	return hit
}

// FlipBit flips bit (0..7, 0 the least significant) of the byte at off on
// the medium, as bit rot would: the flip bypasses faults and is not undone
// by a crash. It does not alter the data of writes not yet synced, which, if
// a crash keeps them, overwrite it.
func (d *Device) FlipBit(off int64, bit uint) error {
	if bit > 7 {
		return fmt.Errorf("faultdev: bit %d is not in 0..7", bit)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.usable(); err != nil {
		return err
	}
	if err := device.CheckRange("flip bit", off, 1, d.Size()); err != nil {
		return err
	}
	var b [1]byte
	if _, err := d.dev.ReadAt(b[:], off); err != nil {
		return err
	}
	b[0] ^= 1 << bit
	if _, err := d.dev.WriteAt(b[:], off); err != nil {
		return err
	}
	if s, ok := d.base[off/int64(d.sector)]; ok {
		s[off%int64(d.sector)] ^= 1 << bit
	}
	return nil
}

// usable returns the error for a request on a crashed or closed device.
// Caller holds d.mu.
func (d *Device) usable() error {
	if d.closed {
		return device.ErrClosed
	}
	if d.crashed {
		return device.ErrCrashed
	}
	return nil
}

// step numbers a state-changing request, crashing instead if it is the
// armed step and calling the hook. It returns with d.mu held if and only if
// err is nil.
func (d *Device) step(op string, off, n int64) error {
	d.mu.Lock()
	if err := d.usable(); err != nil {
		d.mu.Unlock()
		return err
	}
	s := Step{N: d.steps, Op: op, Off: off, Len: n}
	d.steps++
	if d.crashAt == s.N {
		err := d.crashLocked(d.crashOpt)
		d.mu.Unlock()
		return errors.Join(device.ErrCrashed, err)
	}
	hook := d.hook
	if hook == nil {
		return nil
	}
	d.mu.Unlock()
	if err := hook(s); err != nil {
		return err
	}
	d.mu.Lock()
	if err := d.usable(); err != nil {
		d.mu.Unlock()
		return err
	}
	return nil
}

// ReadAt implements [device.Device], applying FailRead and CorruptRead faults.
func (d *Device) ReadAt(p []byte, off int64) (int, error) {
	n := int64(len(p))
	if err := device.CheckRange("read", off, n, d.Size()); err != nil {
		return 0, err
	}
	d.mu.Lock()
	if err := d.usable(); err != nil {
		d.mu.Unlock()
		return 0, err
	}
	fail := d.fire(func(k Kind) bool { return k == FailRead }, off, n)
	var flip *faultRule
	if fail == nil {
		flip = d.fire(func(k Kind) bool { return k == CorruptRead }, off, n)
	}
	d.mu.Unlock()
	if fail != nil {
		return 0, &device.IOError{Op: "read", Off: off, Len: n, Err: fail.Err}
	}
	m, err := d.dev.ReadAt(p, off)
	if err == nil && flip != nil {
		p[flip.Bit/8-off] ^= 1 << (flip.Bit % 8)
	}
	return m, err
}

// WriteAt implements [device.Device], applying FailWrite, DropWrite, TearWrite and
// MisdirectWrite faults.
func (d *Device) WriteAt(p []byte, off int64) (int, error) {
	n := int64(len(p))
	if err := device.CheckRange("write", off, n, d.Size()); err != nil {
		return 0, err
	}
	if err := d.step("write", off, n); err != nil {
		return 0, err
	}
	defer d.mu.Unlock()
	r := d.fire(Kind.isWrite, off, n)
	at, data := off, p
	if r != nil {
		switch r.Kind {
		case FailWrite:
			return 0, &device.IOError{Op: "write", Off: off, Len: n, Err: r.Err}
		case DropWrite:
			return len(p), nil
		case TearWrite:
			data = p[:min(r.Keep, n)]
		case MisdirectWrite:
			at = r.Target
			data = p[:min(n, d.Size()-at)]
		}
	}
	if len(data) > 0 {
		if err := d.apply(at, int64(len(data)), data, func() error {
			_, err := d.dev.WriteAt(data, at)
			return err
		}); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// apply records the synced contents under [off, off+n), runs op on the
// wrapped device and logs what it left there. Caller holds d.mu.
// data is what op writes, or nil when op writes something else (a
// discard) over n bytes.
func (d *Device) apply(off, n int64, data []byte, op func() error) error {
	g := int64(d.sector)
	first, end := off/g, (off+n+g-1)/g
	// Capture the synced version of sectors not yet tracked, reading
	// contiguous runs at once.
	for s := first; s < end; {
		if _, ok := d.base[s]; ok {
			s++
			continue
		}
		e := s + 1
		for e < end {
			if _, ok := d.base[e]; ok {
				break
			}
			e++
		}
		buf := make([]byte, (e-s)*g)
		if _, err := d.dev.ReadAt(buf, s*g); err != nil {
			return err
		}
		for i := s; i < e; i++ {
			d.base[i] = buf[(i-s)*g : (i-s+1)*g : (i-s+1)*g]
		}
		s = e
	}
	err := op()
	rec := make([]byte, n)
	if data != nil && err == nil {
		copy(rec, data)
	} else if _, rerr := d.dev.ReadAt(rec, off); rerr != nil && err == nil {
		err = rerr
	}
	d.log = append(d.log, pending{off: off, data: rec})
	return err
}

// Discard implements [device.Discarder] when the wrapped device does, applying
// FailWrite faults. A discard is tracked for crashes as a write of what the
// wrapped device reads back afterwards.
func (d *Device) Discard(off, n int64) error {
	ds, ok := d.dev.(device.Discarder)
	if !ok {
		return fmt.Errorf("faultdev: discard: %w", errors.ErrUnsupported)
	}
	if err := device.CheckRange("discard", off, n, d.Size()); err != nil {
		return err
	}
	if err := device.CheckAligned("discard", off, n, d.LogicalBlockSize()); err != nil {
		return err
	}
	if err := d.step("discard", off, n); err != nil {
		return err
	}
	defer d.mu.Unlock()
	if r := d.fire(func(k Kind) bool { return k == FailWrite }, off, n); r != nil {
		return &device.IOError{Op: "discard", Off: off, Len: n, Err: r.Err}
	}
	if n == 0 {
		return nil
	}
	return d.apply(off, n, nil, func() error { return ds.Discard(off, n) })
}

// Sync implements [device.Device], applying FailSync faults. When the wrapped
// device's Sync succeeds, every write so far is durable.
func (d *Device) Sync() error {
	if err := d.step("sync", 0, 0); err != nil {
		return err
	}
	defer d.mu.Unlock()
	if r := d.fire(func(k Kind) bool { return k == FailSync }, 0, 0); r != nil {
		return &device.IOError{Op: "sync", Off: 0, Len: d.Size(), Err: r.Err}
	}
	if err := d.dev.Sync(); err != nil {
		return err
	}
	d.base = make(map[int64][]byte)
	d.log = nil
	return nil
}

// NextData implements [device.DataFinder] by asking the wrapped device; it reports
// errors.ErrUnsupported if that is not a device.DataFinder.
func (d *Device) NextData(off int64) (device.Extent, error) {
	d.mu.Lock()
	err := d.usable()
	d.mu.Unlock()
	if err != nil {
		return device.Extent{}, err
	}
	if f, ok := d.dev.(device.DataFinder); ok {
		return f.NextData(off)
	}
	return device.Extent{}, fmt.Errorf("faultdev: seek data: %w", errors.ErrUnsupported)
}

// DropCache implements [device.CacheDropper] by asking the wrapped device, if it
// is a device.CacheDropper.
func (d *Device) DropCache(off, n int64) error {
	d.mu.Lock()
	err := d.usable()
	d.mu.Unlock()
	if err != nil {
		return err
	}
	if c, ok := d.dev.(device.CacheDropper); ok {
		return c.DropCache(off, n)
	}
	return nil
}

// Steps returns the number of steps (writes, syncs, discards) started so
// far.
func (d *Device) Steps() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.steps
}

// Unsynced returns the number of writes since the last completed Sync.
func (d *Device) Unsynced() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.log)
}

// SetHook sets a function called before every step, without locks held,
// so that it may call Crash. If it returns an error the step fails with it
// and does not happen. nil removes the hook.
func (d *Device) SetHook(hook func(Step) error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.hook = hook
}

// CrashAt arms a crash that happens instead of step n: that step fails with
// [device.ErrCrashed], as does every request after it. Crashing at every step of a
// workload in turn (n = 0, 1, ... until the workload completes) explores
// every crash point.
func (d *Device) CrashAt(n int64, opts CrashOptions) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.usable(); err != nil {
		return err
	}
	if n < d.steps {
		return fmt.Errorf("faultdev: crash at step %d: already at step %d", n, d.steps)
	}
	d.crashAt, d.crashOpt = n, opts
	return nil
}

// Crash simulates a crash now: writes not covered by a completed Sync are
// lost except as opts keeps them, and every later request fails with
// [device.ErrCrashed]. Use [Device.Reopen] to carry on with the device as the
// crash left it.
func (d *Device) Crash(opts CrashOptions) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.usable(); err != nil {
		return err
	}
	return d.crashLocked(opts)
}

// crashLocked rolls the wrapped device back to the durable state chosen by
// opts. Caller holds d.mu.
func (d *Device) crashLocked(opts CrashOptions) error {
	d.crashed = true
	d.crashAt = -1
	keep := opts.KeepFunc
	if keep == nil {
		rng := rand.New(rand.NewPCG(opts.Seed, 0x64696663746c))
		p := opts.Keep
		keep = func(int, int64) bool { return p > 0 && (p >= 1 || rng.Float64() < p) }
	}
	g := int64(d.sector)
	cur := make(map[int64][]byte, len(d.base))
	durable := make(map[int64][]byte, len(d.base))
	for s, b := range d.base {
		cur[s] = slices.Clone(b)
		durable[s] = b
	}
	for i, w := range d.log {
		end := w.off + int64(len(w.data))
		for s := w.off / g; s*g < end; s++ {
			lo, hi := max(w.off, s*g), min(end, (s+1)*g)
			copy(cur[s][lo-s*g:hi-s*g], w.data[lo-w.off:hi-w.off])
			if keep(i, s*g) {
				durable[s] = slices.Clone(cur[s])
			}
		}
	}
	sectors := make([]int64, 0, len(durable))
	for s := range durable {
		sectors = append(sectors, s)
	}
	slices.Sort(sectors)
	var err error
	for i := 0; i < len(sectors); {
		j := i + 1
		for j < len(sectors) && sectors[j] == sectors[j-1]+1 {
			j++
		}
		buf := make([]byte, 0, int64(j-i)*g)
		for _, s := range sectors[i:j] {
			buf = append(buf, durable[s]...)
		}
		if _, werr := d.dev.WriteAt(buf, sectors[i]*g); werr != nil && err == nil {
			err = fmt.Errorf("faultdev: restoring the state after a crash: %w", werr)
		}
		i = j
	}
	d.base = make(map[int64][]byte)
	d.log = nil
	return err
}

// Close implements [device.Device]. It does not close the wrapped device. Closing
// without a crash loses nothing: unsynced writes stay on the wrapped device
// as the page cache would eventually write them.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return device.ErrClosed
	}
	d.closed = true
	d.base = make(map[int64][]byte)
	d.log = nil
	return nil
}

// Reopen returns a new Device, without faults, over the wrapped device
// as a crash or Close left it, and closes d. It fails while d is open and
// has not crashed.
func (d *Device) Reopen() (*Device, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.crashed && !d.closed {
		return nil, errors.New("faultdev: reopen of a fault device that is open and has not crashed")
	}
	d.closed = true
	return New(d.dev, Options{Sector: d.sector})
}
