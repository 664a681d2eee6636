package blockdev

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/check"
	"github.com/difctl/difctl/blockdev/parity"
	"github.com/difctl/difctl/store"
)

// Reed-Solomon parity of a Volume (docs/parity.md): the volume's blocks in
// stripes of k data and m parity blocks (package blockdev/parity), the
// parity blocks in a parity file, their checksums in the store.
//
// The parity describes the data on the device: a written block's data, and
// zeros for an unwritten or discarded one. Only stripes whose checksums are
// recorded have parity; a stripe is recorded by ComputeParity (AddParity)
// and kept up to date by every write (parity_write.go); a write that
// cannot bring a stripe's parity up to date (its old data or parity fails,
// and the stripe's data cannot be read whole and verified, nor its failing
// blocks rebuilt from the parity) drops the
// stripe's checksums, and ComputeParity records it again. The repair stage
// rebuilds a failing block from its stripe (parity_repair.go), and every
// rebuilt block is verified against its tuple before it is used.
//
// Crash consistency: a parity intent (store.Txn.MarkParityDirty) names
// each stripe whose parity is to change; it is made durable with the
// write's tuple intents, before any byte of the data or the parity is
// written. The new checksums are kept in memory (the cached SumPages) and
// committed at the fold of the next Sync, after the device and the parity
// file are synced, in the commit that drops the parity intents. Recovery
// (Open) recomputes the parity of every stripe under a parity intent from
// data that verifies against its (recovered) tuples, or drops its
// checksums when some block of it does not verify. So the checksums in
// the store always describe parity that matches the durable data, except
// for stripes under a parity intent, which are never used before recovery
// settles them.
//
// Lock order: flushMu (staging), then parityVol.mu. The repair stage takes
// repairMu, then parityVol.mu. parityVol.mu is held across a write's data
// and parity writes (and the overlay insert), so that whoever holds it
// sees the device's data, its tuples (overlay, then store) and the parity
// of every stripe agree.

// ParitySpec describes the parity AddParity gives a volume.
type ParitySpec struct {
	// Data and Parity are k and m (1 ≤ m ≤ k, k+m ≤ 256).
	Data, Parity int
	// Depth is the interleave depth: 0 for parity.DefaultDepth,
	// parity.Consecutive, parity.WholeVolume, or a number of stripes.
	Depth int64
	// Path names the parity file as Options.OpenParity opens it, recorded
	// in the store. Required.
	Path string
	// Dev is the parity file, of at least ParityFileSize bytes. The
	// volume does not close it (one opened by Options.OpenParity at a
	// later Open, it does).
	Dev device.Device
}

// ParityLayout returns the layout of the parity spec describes on a
// volume of the given geometry, and the parity file's size.
func ParityLayout(spec ParitySpec, blockSize int, blocks int64) (parity.Layout, error) {
	return parity.NewLayout(parity.Options{Data: spec.Data, Parity: spec.Parity, BlockSize: blockSize, Blocks: blocks, Depth: spec.Depth})
}

// ErrParityOffline reports a volume whose parity file cannot be used: it
// did not open, or is not this volume's (a *parity.HeaderError).
var ErrParityOffline = errors.New("blockdev: parity file offline")

// ParityError reports a parity file that cannot be used at Open.
type ParityError struct {
	Path string
	Err  error
}

func (e *ParityError) Error() string {
	return fmt.Sprintf("blockdev: parity file %s: %v", e.Path, e.Err)
}

// Unwrap returns ErrParityOffline and the cause.
func (e *ParityError) Unwrap() []error { return []error{ErrParityOffline, e.Err} }

// parityVol is a volume's parity in use.
type parityVol struct {
	v     *Volume
	cfg   store.ParityConfig
	l     parity.Layout
	codec *parity.Codec
	file  *parity.File
	dev   device.Device
	owned bool // the volume opened dev (Options.OpenParity)
	bs, m int

	mu         sync.Mutex
	pages      map[int64]*parity.SumPage // cached checksum pages, with uncommitted changes
	dirtyPages map[int64]bool            // pages changed since the last fold; under mu
	marked     map[int64]bool            // stripes with a durable parity intent; under flushMu
	writeBad   atomic.Bool               // parity writes not yet synced; under flushMu

	rebuilt, dropped, parityFixed atomic.Int64
	ioErr                         atomic.Pointer[error] // the last parity I/O failure (ioFailed)

	stripeBuf []byte // a stripe's data blocks (loadStripe); under mu
	badPos    []bool // loadStripe's failing positions; under mu
	// untrusted are the stripes under a parity intent on a read-only
	// volume, which cannot recompute them: never used. Set at open.
	untrusted map[int64]bool
}

// maxCleanPages bounds the checksum pages kept in memory with no change
// to commit: past it, the clean ones are dropped (and read again when
// needed).
const maxCleanPages = 4096

func newParityVol(v *Volume, cfg store.ParityConfig, dev device.Device, owned bool) (*parityVol, error) {
	l, err := parity.NewLayout(parity.Options{Data: cfg.Data, Parity: cfg.Parity, BlockSize: v.bs, Blocks: v.blocks, Depth: cfg.Depth})
	if err != nil {
		return nil, err
	}
	if l.Depth() != cfg.Depth {
		return nil, fmt.Errorf("%w: depth %d is recorded, the layout has %d", parity.ErrInvalidLayout, cfg.Depth, l.Depth())
	}
	codec, err := l.NewCodec()
	if err != nil {
		return nil, err
	}
	f, err := parity.NewFile(dev, l)
	if err != nil {
		return nil, err
	}
	return &parityVol{v: v, cfg: cfg, l: l, codec: codec, file: f, dev: dev, owned: owned,
		bs: v.bs, m: cfg.Parity,
		pages: make(map[int64]*parity.SumPage), dirtyPages: make(map[int64]bool), marked: make(map[int64]bool)}, nil
}

func parityID(cfg store.ParityConfig) ([16]byte, error) {
	var id [16]byte
	b, err := hex.DecodeString(cfg.ID)
	if err != nil || len(b) != 16 {
		return id, fmt.Errorf("parity id %q", cfg.ID)
	}
	copy(id[:], b)
	return id, nil
}

// openParity opens the volume's parity (Open), after recovery of its
// tuples: the parity file through Options.OpenParity, its header checked,
// then the parity intents of a crashed session resolved (recoverParity).
// A writable volume whose parity file does not open, or is another's,
// fails to open (*ParityError): its writes could not keep the parity up
// to date. A read-only one opens without its parity.
func (v *Volume) openParity(ctx context.Context) error {
	cfg, ok, err := v.tup.Parity()
	if err != nil {
		return fmt.Errorf("blockdev: open volume %q: %w", v.opts.Name, err)
	}
	if !ok {
		return nil
	}
	pv, err := v.openParityFile(cfg)
	if err != nil {
		if v.opts.ReadOnly {
			v.parityErr = err
			return nil
		}
		return err
	}
	v.par, v.stg.par = pv, pv
	if v.opts.ReadOnly {
		// Stripes under a parity intent are not to be used before a
		// writable open settles them.
		dirty, err := v.tup.ParityDirty()
		if err != nil {
			pv.close()
			v.par, v.stg.par = nil, nil
			return fmt.Errorf("blockdev: open volume %q: %w", v.opts.Name, err)
		}
		pv.untrusted = make(map[int64]bool, len(dirty))
		for _, s := range dirty {
			pv.untrusted[s] = true
		}
		return nil
	}
	if err := v.recoverParity(ctx); err != nil {
		pv.close()
		v.par, v.stg.par = nil, nil
		return err
	}
	return nil
}

// openParityFile opens and checks the parity file of cfg.
func (v *Volume) openParityFile(cfg store.ParityConfig) (*parityVol, error) {
	perr := func(err error) error { return &ParityError{Path: cfg.Path, Err: err} }
	if v.opts.OpenParity == nil {
		return nil, perr(errors.New("no Options.OpenParity to open it"))
	}
	dev, err := v.opts.OpenParity(cfg.Path)
	if err != nil {
		return nil, perr(err)
	}
	pv, err := newParityVol(v, cfg, dev, true)
	if err == nil {
		var id [16]byte
		if id, err = parityID(cfg); err == nil {
			err = pv.file.CheckHeader(id)
		}
	}
	if err != nil {
		dev.Close()
		return nil, perr(err)
	}
	return pv, nil
}

func (pv *parityVol) close() {
	if pv.owned {
		pv.dev.Close()
	}
}

// closeParity closes the parity file the volume opened.
func (v *Volume) closeParity() {
	if v.par != nil {
		v.par.close()
	}
}

// page returns the checksum page of stripe s, from the cache or the store.
// Caller holds pv.mu.
func (pv *parityVol) page(s int64) (*parity.SumPage, error) {
	p := parity.SumPageOf(s)
	if pg := pv.pages[p]; pg != nil {
		return pg, nil
	}
	if len(pv.pages) >= maxCleanPages+len(pv.dirtyPages) {
		for q := range pv.pages {
			if !pv.dirtyPages[q] {
				delete(pv.pages, q)
			}
		}
	}
	pg := pv.l.NewSumPage(p)
	rec, err := pv.v.tup.ParitySums(p)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return nil, err
	default:
		if err := pg.Decode(rec); err != nil {
			return nil, err
		}
	}
	pv.pages[p] = pg
	return pg, nil
}

// sums returns stripe s's checksums (a copy), and false if it has none.
// Caller holds pv.mu.
func (pv *parityVol) sums(s int64) ([]uint32, bool, error) {
	pg, err := pv.page(s)
	if err != nil {
		return nil, false, err
	}
	sums, ok := pg.Stripe(s)
	if !ok || pv.untrusted[s] {
		return nil, false, nil
	}
	return append([]uint32(nil), sums...), true, nil
}

// setSums records stripe s's checksums (nil: none, the stripe's parity
// dropped) in the cache, to be committed at the next fold. Caller holds
// pv.mu.
func (pv *parityVol) setSums(s int64, sums []uint32) error {
	pg, err := pv.page(s)
	if err != nil {
		return err
	}
	if sums == nil {
		pg.Unset(s)
	} else {
		pg.Set(s, sums)
	}
	pv.dirtyPages[pg.Page()] = true
	return nil
}

// hasPending reports whether a fold has parity work: checksums to commit
// or parity intents to drop. Caller holds flushMu.
func (pv *parityVol) hasPending() bool {
	pv.mu.Lock()
	defer pv.mu.Unlock()
	return len(pv.dirtyPages) > 0 || len(pv.marked) > 0
}

// sync syncs the parity file if it was written since the last sync. A
// sync that fails drops the checksums of every stripe under a parity
// intent (their parity may not be durable: it is never used, and
// ComputeParity computes it again) and is recorded (ParityStatus.IOErr):
// a failing parity file costs the parity, not the volume. Only a fatal
// error (the file closed, a crash) is returned. Caller holds flushMu.
func (pv *parityVol) sync() error {
	if !pv.writeBad.Load() {
		return nil
	}
	if err := pv.dev.Sync(); err != nil {
		err = fmt.Errorf("blockdev: sync of the parity file %s: %w", pv.cfg.Path, err)
		if check.Fatal(err) {
			return err
		}
		pv.ioFailed(err)
		pv.mu.Lock()
		defer pv.mu.Unlock()
		for s := range pv.marked {
			if s >= pv.l.Stripes() {
				continue
			}
			if err := pv.setSums(s, nil); err != nil {
				return err
			}
			pv.dropped.Add(1)
		}
	}
	pv.writeBad.Store(false)
	return nil
}

// ioFailed records a failure of the parity file's I/O that cost the
// parity of some stripes (their checksums dropped), not the volume.
func (pv *parityVol) ioFailed(err error) { pv.ioErr.Store(&err) }

// fold stages in x, after the fold's tuples, the changed checksum pages
// and the deletion of every parity intent: the data and the parity file
// are synced (syncLocked). Caller holds flushMu.
func (pv *parityVol) fold(x *store.Txn) error {
	pv.mu.Lock()
	defer pv.mu.Unlock()
	for p := range pv.dirtyPages {
		pg := pv.pages[p]
		if err := x.SetParitySums(p, pg.Encode(make([]byte, 0, pg.EncodedLen()))); err != nil {
			return err
		}
	}
	for s := range pv.marked {
		if err := x.ClearParityDirty(s); err != nil {
			return err
		}
	}
	return nil
}

// folded forgets what fold committed. Caller holds flushMu.
func (pv *parityVol) folded() {
	pv.mu.Lock()
	defer pv.mu.Unlock()
	clear(pv.dirtyPages)
	clear(pv.marked)
}

// tuplesOf loads the current tuples, sums and written bits of blocks [lba,
// lba+n) of the device's data: the overlay's (flushed, not yet folded)
// over the committed ones. Staged blocks, not yet on the device, keep the
// tuples of the data the device holds. Caller holds pv.mu or flushMu, so
// that no flush moves the device's data under it.
func (pv *parityVol) tuplesOf(lba int64, n int, tuples []byte, sums []uint32, written store.Bitmap) error {
	v := pv.v
	if _, err := v.tup.ReadRangeCached(lba, tuples[:n*v.ts], sums, written); err != nil {
		return fmt.Errorf("blockdev: reading the tuples of blocks [%d, %d): %w", lba, lba+int64(n), err)
	}
	s := v.stg
	s.ovMu.RLock()
	defer s.ovMu.RUnlock()
	if len(s.overlay) == 0 {
		return nil
	}
	end := lba + int64(n)
	for b := lba; b < end; b++ {
		pg := s.overlay[b>>ovShift]
		if pg == nil {
			b = (b>>ovShift+1)<<ovShift - 1
			continue
		}
		o, i := int(b&(ovP-1)), int(b-lba)
		if !hasBit(pg.mask[:], o) {
			continue
		}
		copy(tuples[i*v.ts:(i+1)*v.ts], pg.tuples[o*v.ts:])
		if v.sums {
			sums[i] = pg.sums[o]
		}
		written.Set(i)
	}
	return nil
}

// blockState is what a data block of a stripe is, for its parity.
type blockState uint8

const (
	blockGood blockState = iota // written, and its data verifies
	blockZero                   // unwritten or discarded: zeros
	blockBad                    // written, and its data fails or cannot be read
)

// loadBlock reads data block lba into buf and tells whether it verifies
// against its current tuple (tuplesOf); an unwritten block is zeros,
// whatever the device holds. Only a failure of the store (or a fatal
// device error) is an error. Caller holds pv.mu or flushMu.
func (pv *parityVol) loadBlock(lba int64, buf []byte) (blockState, error) {
	v := pv.v
	var tuple [16]byte
	var sums [1]uint32
	written := store.NewBitmap(1)
	var sp []uint32
	if v.sums {
		sp = sums[:]
	}
	if err := pv.tuplesOf(lba, 1, tuple[:v.ts], sp, written); err != nil {
		return blockBad, err
	}
	if !written.Has(0) {
		return blockZero, nil
	}
	if err := readDevice(v.dev, buf, lba*int64(v.bs), false); err != nil {
		if check.Fatal(err) {
			return blockBad, err
		}
		return blockBad, nil
	}
	if !v.ok(buf, tuple[:v.ts], v.params(lba), true, sums[0]) {
		return blockBad, nil
	}
	return blockGood, nil
}

// ParityStatus is the state of a volume's parity.
type ParityStatus struct {
	// Config is the parity as the store records it.
	Config store.ParityConfig
	// Layout is its layout.
	Layout parity.Layout
	// Online: the parity file is open and in use. Err says why not.
	Online bool
	Err    error
	// Stripes is the number of stripes; Recorded how many have parity
	// (checksums recorded), the others are not protected.
	Stripes, Recorded int64
	// Rebuilt counts the blocks rebuilt from parity since Open (data
	// blocks served or repaired), ParityRewritten the parity blocks
	// rewritten; Dropped the stripes whose parity a write could not
	// update (a bad block, or the parity file's I/O failed: IOErr, the
	// last such failure since Open).
	Rebuilt, ParityRewritten, Dropped int64
	IOErr                             error
}

// Parity returns the state of the volume's parity, and false if it has
// none.
func (v *Volume) Parity() (ParityStatus, bool, error) {
	done, err := v.enter()
	if err != nil {
		return ParityStatus{}, false, err
	}
	defer done()
	pv := v.par
	if pv == nil {
		cfg, ok, err := v.tup.Parity()
		if err != nil || !ok {
			return ParityStatus{}, ok, err
		}
		st := ParityStatus{Config: cfg, Err: v.parityErr}
		st.Layout, _ = parity.NewLayout(parity.Options{Data: cfg.Data, Parity: cfg.Parity, BlockSize: v.bs, Blocks: v.blocks, Depth: cfg.Depth})
		st.Stripes = st.Layout.Stripes()
		return st, true, nil
	}
	st := ParityStatus{Config: pv.cfg, Layout: pv.l, Online: true, Stripes: pv.l.Stripes(),
		Rebuilt: pv.rebuilt.Load(), ParityRewritten: pv.parityFixed.Load(), Dropped: pv.dropped.Load()}
	if e := pv.ioErr.Load(); e != nil {
		st.IOErr = *e
	}
	pv.mu.Lock()
	defer pv.mu.Unlock()
	for p := range pv.l.SumPages() {
		pg, err := pv.page(p * parity.SumPageStripes)
		if err != nil {
			return st, true, err
		}
		st.Recorded += int64(pg.Recorded())
	}
	for u := range pv.untrusted {
		if pg, err := pv.page(u); err == nil && u < pv.l.Stripes() {
			if _, ok := pg.Stripe(u); ok {
				st.Recorded--
			}
		}
	}
	return st, true, nil
}

// AddParity gives the volume Reed-Solomon parity as spec describes, with
// no stripe recorded yet: ComputeParity computes it. The parity file's
// header is written and synced, then the configuration recorded (synced).
// A volume with parity already refuses (RemoveParity first).
func (v *Volume) AddParity(spec ParitySpec) error {
	if v.opts.ReadOnly {
		return fmt.Errorf("blockdev: add parity: %w", device.ErrReadOnly)
	}
	if err := v.keyedWritable("add parity"); err != nil {
		return err
	}
	if spec.Dev == nil || spec.Path == "" {
		return errors.New("blockdev: add parity: no device or no path")
	}
	l, err := ParityLayout(spec, v.bs, v.blocks)
	if err != nil {
		return fmt.Errorf("blockdev: add parity: %w", err)
	}
	return v.quiesce(func() error {
		if _, ok, err := v.tup.Parity(); err != nil || ok {
			if err == nil {
				err = errors.New("the volume has parity already")
			}
			return fmt.Errorf("blockdev: add parity: %w", err)
		}
		idHex, err := newVolumeUID()
		if err != nil {
			return err
		}
		cfg := store.ParityConfig{Data: spec.Data, Parity: spec.Parity, Depth: l.Depth(), Path: spec.Path, ID: idHex, Added: time.Now().UTC()}
		pv, err := newParityVol(v, cfg, spec.Dev, false)
		if err != nil {
			return fmt.Errorf("blockdev: add parity: %w", err)
		}
		id, _ := parityID(cfg)
		if err := pv.file.WriteHeader(id); err != nil {
			return fmt.Errorf("blockdev: add parity: %w", err)
		}
		if err := spec.Dev.Sync(); err != nil {
			return fmt.Errorf("blockdev: add parity: %w", err)
		}
		if err := v.tup.SetParity(cfg, true); err != nil {
			return fmt.Errorf("blockdev: add parity: %w", err)
		}
		v.par, v.stg.par = pv, pv
		return nil
	})
}

// RemoveParity drops the volume's parity: its configuration, checksums and
// parity intents. The parity file is closed if the volume opened it, and
// left as it is.
func (v *Volume) RemoveParity() error {
	if v.opts.ReadOnly {
		return fmt.Errorf("blockdev: remove parity: %w", device.ErrReadOnly)
	}
	return v.quiesce(func() error {
		if _, ok, err := v.tup.Parity(); err != nil || !ok {
			if err == nil {
				err = errors.New("the volume has no parity")
			}
			return fmt.Errorf("blockdev: remove parity: %w", err)
		}
		if err := v.tup.RemoveParity(true); err != nil {
			return fmt.Errorf("blockdev: remove parity: %w", err)
		}
		if v.par != nil {
			v.par.close()
		}
		v.par, v.stg.par, v.parityErr = nil, nil, nil
		return nil
	})
}

// ParityFileSize returns the size in bytes of the parity file of spec on
// the volume: its parity blocks and header.
func (v *Volume) ParityFileSize(spec ParitySpec) (int64, error) {
	l, err := ParityLayout(spec, v.bs, v.blocks)
	if err != nil {
		return 0, err
	}
	return l.FileSize(), nil
}
