package blockdev

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// Defaults of [Options].
const (
	DefaultVolumeName   = "default"
	DefaultRereads      = 2
	DefaultStagingBytes = 32 << 20
	DefaultMaxUnsynced  = 1 << 30
	DefaultOverlayBytes = 32 << 20
	DefaultTupleCache   = 4 << 20
)

// protectCursor is the store cursor (in the scrub cursor namespace) that
// records how far Create has protected the device. A volume is usable once
// it says Pass >= 1.
const protectCursor = "blockdev.protect"

var (
	// ErrMismatch is matched by every *MismatchError: the store's volume
	// does not describe the device or format it is opened with.
	ErrMismatch = errors.New("blockdev: volume does not match")
	// ErrIncomplete reports a volume whose protection by Create was
	// interrupted; calling Create again with the same options resumes it.
	ErrIncomplete = errors.New("blockdev: volume protection incomplete")
	// ErrVolumeFailed is matched by the errors of every operation after a
	// volume failed to write data or tuples (a device write or sync, or a
	// store commit, failed). Its state on the medium is then resolved by
	// crash recovery the next time it is opened.
	ErrVolumeFailed = errors.New("blockdev: volume failed")
	// ErrSectorSum matches a block whose data does not match the store's
	// CRC-32C sector checksum. It also matches dif.ErrIntegrity.
	ErrSectorSum error = &integritySentinel{"blockdev: sector checksum mismatch"}
)

// integritySentinel is a sentinel that also matches dif.ErrIntegrity.
type integritySentinel struct{ s string }

func (e *integritySentinel) Error() string        { return e.s }
func (e *integritySentinel) Is(target error) bool { return target == dif.ErrIntegrity }

// MismatchError reports that a volume's manifest does not match the device
// or the options it is opened or created with. It matches ErrMismatch.
type MismatchError struct {
	Volume string
	Field  string // "device size", "device id", "format", "block size", ...
	Stored string // value in the store's manifest
	Given  string // value of the device or the options
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("blockdev: volume %q: %s is %s in the store but %s here", e.Volume, e.Field, e.Stored, e.Given)
}

func (e *MismatchError) Unwrap() error { return ErrMismatch }

// SumError is a sector checksum mismatch of one block. It matches
// ErrSectorSum and dif.ErrIntegrity.
type SumError struct {
	LBA      int64
	Expected uint32 // CRC-32C computed from the data
	Actual   uint32 // stored sum
}

func (e *SumError) Error() string {
	return fmt.Sprintf("blockdev: block %d: sector checksum %08x, stored %08x", e.LBA, e.Expected, e.Actual)
}

func (e *SumError) Unwrap() error { return ErrSectorSum }

// MaxListedProblems is how many problems an *IntegrityError lists.
const MaxListedProblems = 64

// IntegrityError reports the blocks of a request that failed verification
// (after re-reads). It matches dif.ErrIntegrity, and through Unwrap the
// listed problems' causes (*dif.CheckError, *SumError), so that
// errors.Is(err, dif.ErrGuard) and errors.As(err, &checkErr) work.
type IntegrityError struct {
	Op       string    // "read" or "write" (the read-verify of a partial block)
	LBA      int64     // first failing block
	N        int64     // blocks from LBA to the last failing block, inclusive
	Failed   int64     // failing blocks among them
	Problems []Problem // the first MaxListedProblems failed checks, in LBA order
}

func (e *IntegrityError) Error() string {
	s := fmt.Sprintf("blockdev: %s: integrity check failed: %d of blocks [%d, %d)", e.Op, e.Failed, e.LBA, e.LBA+e.N)
	if len(e.Problems) > 0 {
		p := e.Problems[0]
		if p.Kind == KindUnwrittenData {
			s += fmt.Sprintf("; block %d: data in an unwritten block", p.LBA)
		} else {
			s += fmt.Sprintf("; block %d: %s expected %#x, stored %#x", p.LBA, p.Kind, p.Expected, p.Actual)
		}
	}
	return s
}

// Is reports whether target is dif.ErrIntegrity.
func (e *IntegrityError) Is(target error) bool { return target == dif.ErrIntegrity }

// Unwrap returns the causes of the listed problems.
func (e *IntegrityError) Unwrap() []error {
	errs := make([]error, 0, len(e.Problems))
	for _, p := range e.Problems {
		if p.Err != nil {
			errs = append(errs, p.Err)
		}
	}
	return errs
}

// Options tune a [Volume] at run time. They are not stored; the zero value
// of each field is its default.
type Options struct {
	// Name is the volume's name in the store; many volumes may share one
	// KV. Default: DefaultVolumeName ("default").
	Name string
	// DeviceID identifies the device (a serial, a WWN, a path). Create
	// stores it in the manifest; Open, when it is not empty, refuses a
	// volume whose manifest names another device. Default: "" (not checked).
	DeviceID string
	// Rereads is how many times ReadAt (and the read of the partial blocks
	// of a write) reads a block that failed verification again, around the
	// page cache where the device allows it, before reporting it. A block
	// that passes on a re-read is returned and counted as transient.
	// Default 0 means DefaultRereads (2); negative means none.
	Rereads int
	// StagingBytes bounds the memory holding written data that is not yet
	// on the device. Writes are staged in a batch of StagingBytes/2 (served
	// to readers from memory) while the previous batch is written out; each
	// batch's intents are made durable with one store sync. It must hold
	// at least two blocks. Default 0 means DefaultStagingBytes (32 MiB).
	StagingBytes int
	// MaxUnsynced bounds the data written since the last Sync whose new
	// tuples the volume keeps in memory (and that recovery would have to
	// resolve after a crash); beyond it the volume syncs by itself. At
	// least StagingBytes. Default 0 means DefaultMaxUnsynced (1 GiB).
	MaxUnsynced int64
	// OverlayBytes bounds the memory holding the new tuples (and sector
	// checksums, and keyed tags) of written data that is on the device
	// but not yet folded into the store's pages: beyond it the volume
	// syncs by itself, as beyond MaxUnsynced (until that sync's fold, the
	// overlay may pass the bound by the pieces of three staging batches:
	// the one that crossed it, and the two the sync writes out). They are
	// kept in pieces of 64 blocks, so sequential writes fill them
	// (MaxUnsynced bounds them first: 24 MiB of tuples and checksums for
	// 1 GiB of 512-byte blocks), while each random write takes a piece of
	// its own (about 900 bytes at 12 bytes a block). Default 0 means
	// DefaultOverlayBytes (32 MiB); at least 64 KiB.
	OverlayBytes int
	// RewriteBadBlocks lets a write that covers part of a block rewrite it
	// even when the block fails verification: the bytes outside the write
	// are kept as read and protected under a new tuple. Use it only to
	// repair. Default false: such a write fails with an *IntegrityError
	// and writes nothing. (A write that covers whole blocks always
	// replaces them, good or bad: new data, new tuples.)
	RewriteBadBlocks bool
	// VerifyWorkers says whether a large read (256 KiB or more) shares its
	// reading and verifying with a second goroutine: the request is cut
	// into pieces of about 128 KiB that the caller and the process's split
	// helper (blockdev/internal/split) take in turn, the caller starting
	// at once, and the split's gate turns the sharing off while the second
	// CPU does not help (busy with other work). Default 0, and any
	// positive value (at most 63; there is one helper whatever the value):
	// shared, where GOMAXPROCS is 2 or more. Negative: every read of an
	// unkeyed volume is copied and verified on the caller's goroutine (a
	// keyed volume's large reads share their Poly1305 work with the helper
	// in either case). The helper polls for a moment after each request,
	// so a stream of reads costs up to that much of a second CPU per
	// request. (What sharing gains is in docs/performance.md, "This tier
	// today".)
	VerifyWorkers int
	// ReadOnly refuses WriteAt and Discard with ErrReadOnly. Crash
	// recovery at Open still updates the store. Default false.
	ReadOnly bool
	// TupleCacheBytes bounds the decoded tuple pages the volume keeps for
	// ReadAt and WriteAt's edge blocks (store.Tuples.SetPageCache), so that
	// blocks read again cost a copy of their tuples instead of a store
	// read. Scrubs and CheckRun always read the store, which checks each
	// page's checksum. Default 0 means DefaultTupleCache (4 MiB: the tuples
	// and sector checksums of 170 MiB of 512-byte blocks, or 1.3 GiB of
	// 4 KiB blocks); negative means none.
	TupleCacheBytes int
	// NoMap reads every block with the device's ReadAt. By default, when
	// the device is a [device.Mapper] (a File not opened with direct I/O), reads
	// that may use the page cache take blocks from its mapping and copy
	// and verify them in one pass, which costs about as much as the
	// kernel's copy alone. A fault on the mapping (an I/O error, a file
	// that shrank) falls back to ReadAt for that piece, which reports it
	// as usual.
	NoMap bool
	// Key is the key of a keyed volume (see keyed.go and CreateOptions.Key).
	// With it, reads and checks verify every block's keyed tag too; a
	// wrong key fails Open with ErrWrongKey. Without it a keyed volume
	// opens for reads and checks of its tuples only, and refuses writes,
	// discards and remaps with ErrKeyRequired. A key for a volume that is
	// not keyed fails with ErrNotKeyed. Default nil.
	Key *Key
	// KeyedCRC makes the verified reads of a keyed volume opened with its
	// key compute every block's CRC guard and sector checksum too. By
	// default a read whose blocks all verify their keyed tags, with their
	// tag pages' MACs, takes the keyed read path (read_keyed.go): it checks
	// the app and ref tags and the keyed tags, and the guards and sector
	// checksums only of runs where anything fails or is unusual, since a
	// verified tag and page MAC prove that the block and its stored tuple
	// are those written together, with the guard computed from that data.
	// Checks (CheckRun, difctl verify and scrub) always compute both.
	KeyedCRC bool
	// RepairSources are copies of the volume's data (backups, snapshots,
	// NBD exports) that the repair stage (read_repair.go) takes a failing
	// block from when its copy verifies against the block's tuple: ReadAt
	// returns it and writes it over the bad block (a read-only volume only
	// returns it), and CheckRun reports the block repairable (or, with
	// CheckOptions.Repair, repairs it). A source whose Size, if it has one,
	// is not the volume's fails Open with a *MismatchError. Default none.
	RepairSources []RepairSource
	// OpenLeg opens the mirror leg the store names name (a path or a URL,
	// as given to AddMirror) at Open; the volume closes what it returns.
	// A leg that fails to open is offline (Legs), and on a volume that can
	// write it is recorded stale as a whole, for Resync to bring back.
	// Default nil: a volume with mirror legs is opened without them (and,
	// writable, records them all stale).
	OpenLeg func(name string) (device.Device, error)
	// OpenParity opens the parity file the store names path (as given to
	// AddParity) at Open; the volume closes what it returns. A writable
	// volume whose parity file does not open, or is not its own, fails to
	// open (*ParityError); a read-only one opens without its parity.
	// Default nil: a volume with parity opens only read-only.
	OpenParity func(path string) (device.Device, error)
	// OnRepair, if not nil, is called after a read (ReadAt, not a check)
	// repaired a block, with one of its problems (Repair, Source and Leg
	// set), from the reading goroutine. Default nil.
	OnRepair func(Problem)
	// NoRepair keeps ReadAt from repairing: a failing block fails the read
	// even when a source holds a verified copy. Checks still report
	// repairable blocks. Default false.
	NoRepair bool
	// Witness keeps the seal of a keyed volume (its generation and MAC)
	// where an attacker of the device and the store cannot put back an
	// older one (witness.go): Open refuses a store whose seal is older
	// than the witness's with a *RollbackError, and Create, Open and
	// every Sync record the seal in it once it is durable (with a witness
	// the last store commit of Sync is synced). It is written only with
	// the Key. Default nil: none (a rollback of the whole volume is not
	// found).
	Witness Witness
}

func (o *Options) normalize(bs int) error {
	if o.Name == "" {
		o.Name = DefaultVolumeName
	}
	switch {
	case o.Rereads == 0:
		o.Rereads = DefaultRereads
	case o.Rereads < 0:
		o.Rereads = 0
	case o.Rereads > 100:
		return fmt.Errorf("blockdev: volume options: %d re-reads, at most 100", o.Rereads)
	}
	if o.VerifyWorkers > 63 {
		return fmt.Errorf("blockdev: volume options: %d verify workers, want at most 63 (or negative: none)", o.VerifyWorkers)
	}
	if o.StagingBytes == 0 {
		o.StagingBytes = DefaultStagingBytes
	}
	if o.StagingBytes < 2*bs || o.StagingBytes > 1<<30 {
		return fmt.Errorf("blockdev: volume options: staging buffer of %d bytes, want 2 blocks (%d) to 1 GiB", o.StagingBytes, 2*bs)
	}
	if o.MaxUnsynced == 0 {
		o.MaxUnsynced = DefaultMaxUnsynced
	}
	if o.OverlayBytes == 0 {
		o.OverlayBytes = DefaultOverlayBytes
	}
	if o.OverlayBytes < 64<<10 {
		return fmt.Errorf("blockdev: volume options: overlay of %d bytes, want at least 64 KiB", o.OverlayBytes)
	}
	if o.TupleCacheBytes == 0 {
		o.TupleCacheBytes = DefaultTupleCache // negative stays: none
	}
	if o.MaxUnsynced < int64(o.StagingBytes) {
		return fmt.Errorf("blockdev: volume options: max unsynced %d bytes below the staging buffer (%d)", o.MaxUnsynced, o.StagingBytes)
	}
	return nil
}

// Stats count a volume's activity since it was opened.
type Stats struct {
	ReadBlocks    int64 // blocks verified by ReadAt and CheckRun
	WrittenBlocks int64 // blocks written by WriteAt (partial blocks count once)
	Rereads       int64 // re-reads of failing blocks
	Transient     int64 // blocks that failed and then passed a re-read
	Failed        int64 // blocks reported as failing
	Flushes       int64 // staged batches written (one store sync each)
	Syncs         int64 // completed Syncs, including automatic ones
	AutoSyncs     int64 // Syncs the volume did by itself (MaxUnsynced, OverlayBytes)
	MapFaults     int64 // pieces whose mapped read faulted and were read again with ReadAt
	SplitRuns     int64 // runs read in pieces shared with the split helper (Options.VerifyWorkers)
	Repaired      int64 // failing blocks written over with a verified copy (read_repair.go)
	Unrepairable  int64 // failing blocks for which no source had a verified copy
	// Tuple pages ReadAt found in the tuple cache and read from the store
	// (see Options.TupleCacheBytes).
	TupleCacheHits, TupleCacheMisses int64
	Recovery                         RecoveryStats
}

// RecoveryStats describe the crash recovery run by Open.
type RecoveryStats struct {
	Intents int64 // open intents found
	Blocks  int64 // blocks they covered
	Folded  int64 // blocks whose data matched a new tuple: committed
	Kept    int64 // blocks whose data matched the committed tuple (or, unwritten, is zeros)
	Torn    int64 // blocks matching neither: recorded as open "torn" findings
	// Reconciled counts the copies of blocks written to the mirror legs
	// whose copy differed from the one recovery took (mirror.go).
	Reconciled int64
	// ParityStripes counts the stripes under a parity intent whose parity
	// recovery computed again (or dropped: parity_write.go).
	ParityStripes int64
}

// Volume is a protected block device: every write stores protection
// information (a T10 DIF/NVMe PI tuple and, where the manifest says so, a
// CRC-32C sector checksum per block) in a store, and every read is
// verified against it. It implements [CheckSource] for the scrub engine.
//
// # Creating and opening
//
// [Create] protects the existing contents of a device (resumably, skipping
// the holes of sparse images) and records the volume in a [store.KV] under
// a name; [Open] opens it again, refusing a device or format that does not
// match the stored manifest (*[MismatchError]) and running crash recovery.
// The tuples are kept apart from the data (the DIX layout), so the device
// keeps its size and layout and can be used without difctl.
//
// # Reading and writing
//
// [Volume.ReadAt] verifies every block it returns; a partial block is read
// and verified whole. A failing block is re-read, around the page cache
// where the device allows it, before it is reported as an *[IntegrityError]
// (matching dif.ErrIntegrity) naming the blocks and the field; blocks that
// pass on a re-read are counted in [Stats].Transient. Blocks never written
// or discarded read as zeros, and must be zeros (or a hole) on the device:
// one holding anything else fails with [ErrUnwrittenData]. [Volume.WriteAt] generates the tuples; a
// partial block is read, verified and rewritten whole, and a write into a
// block that fails verification is refused rather than laundered under a
// new tuple. [Volume.Discard] marks blocks discarded. [Volume.Sync] makes
// every earlier write durable with its tuples.
//
// # Crash consistency
//
// A crash can separate a block's data (on the device) from its tuple (in
// the store). Before data is written, its new tuples are made durable as
// intents beside the committed ones, for a whole staged batch of writes at
// once (one store sync per batch of Options.StagingBytes/2, never one per
// write); Sync writes out the batch, syncs the device and commits the
// tuples. Open resolves the intents left by a crash: a block whose data
// matches a new tuple takes it, one matching its committed tuple keeps it.
// So after a crash at any instant:
//
//   - every write completed before the last completed Sync reads back
//     with its data;
//   - a block written since reads back as its previous or as a newer
//     version, and verifies, provided the device writes each block
//     atomically (its sector is at least the block size, as for 512-byte
//     blocks, or 4 KiB blocks on 4Kn drives);
//   - a block that a crash tore inside (4 KiB blocks on a device that
//     writes 512-byte sectors independently) can match neither tuple. It is
//     never re-checksummed: recovery records it as an open finding of kind
//     [KindTorn] in the store's findings log, keeps its committed tuple, and
//     it fails verification until it is rewritten;
//   - corruption that happened before the crash is still reported.
//
// No data is written twice (no journal) and no tuple is ever recomputed
// from the data found on the device.
//
// # Concurrency and memory
//
// A Volume is safe for concurrent use. Requests over overlapping blocks are
// serialized (reads share), so a read never sees half a write; requests
// over disjoint blocks run in parallel. Memory is bounded: two staging
// batches of Options.StagingBytes/2, the new tuples of at most
// Options.MaxUnsynced bytes of unsynced writes (the volume syncs by itself
// beyond it), per-request scratch of about 1 MiB, and the decoded tuple
// pages of Options.TupleCacheBytes (the store's page cache).
type Volume struct {
	dev    device.Device
	tup    *store.Tuples
	man    store.Manifest
	opts   Options
	blocks int64
	chunk  int // blocks per verification chunk

	blockCheck // format, geometry and params: the block classifier

	closeMu sync.RWMutex // held shared by every operation, exclusively by Close
	closed  bool
	fails   failure

	locks    rangeLock
	repairMu sync.Mutex // serializes repairs (read_repair.go)
	stg      *staging   // staged writes, the overlay of flushed tuples, intents

	mapper device.Mapper // dev as a Mapper, unless Options.NoMap
	noMap  atomic.Bool   // the device refused to map: use ReadAt
	// noHoles: the device cannot tell holes (SEEK_DATA unsupported).
	noHoles atomic.Bool

	scratch sync.Pool // *scratch
	// leave is closeMu.RUnlock, made once: enter's result, which as a
	// method value made per call would be allocated per operation.
	leave func()

	st       volStats
	recovery RecoveryStats

	mirror *mirrorDev // the mirror legs, which dev is then (mirror.go); nil without

	tags       tagEngine // keyed volume opened with its key (keyed.go)
	keyedNoKey bool      // keyed volume opened without it
	witnessed  uint64    // the seal generation the witness holds (witness.go); under flushMu

	par       *parityVol // Reed-Solomon parity in use (parity_volume.go); nil without
	parityErr error      // why a read-only volume's parity is not in use
}

// volStats are the counters behind Stats.
type volStats struct {
	read, written, rereads, transient, failed atomic.Int64
	mapFaults, splitRuns                      atomic.Int64
	repaired, unrepairable                    atomic.Int64
	flushes, syncs, autoSyncs                 atomic.Int64
}

// failure is a volume's sticky failure: the first error of a write, a
// device sync or a store commit, after which every operation fails.
type failure struct{ p atomic.Pointer[error] }

// err returns the failure, if any.
func (f *failure) err() error {
	if p := f.p.Load(); p != nil {
		return *p
	}
	return nil
}

// set records err as the failure (unless one is recorded) and returns it
// wrapped in ErrVolumeFailed.
func (f *failure) set(err error) error {
	werr := fmt.Errorf("%w: %w", ErrVolumeFailed, err)
	f.p.CompareAndSwap(nil, &werr)
	return werr
}

// Open opens the volume of dev described in kv (see Options.Name), checks
// its manifest against the device, and runs crash recovery: every intent
// left by an interrupted session is resolved against the data on the
// device (see the package documentation). The caller keeps ownership of
// dev and kv and closes them after the volume.
func Open(ctx context.Context, dev device.Device, kv store.KV, opts Options) (*Volume, error) {
	if dev == nil || kv == nil {
		return nil, errors.New("blockdev: open volume: nil device or store")
	}
	name := opts.Name
	if name == "" {
		name = DefaultVolumeName
	}
	tup, err := store.OpenTuples(kv, name, nil)
	if err != nil {
		return nil, fmt.Errorf("blockdev: open volume %q: %w", name, err)
	}
	v, err := newVolume(dev, tup, opts)
	if err != nil {
		return nil, err
	}
	if err := v.checkComplete(); err != nil {
		return nil, err
	}
	if err := v.checkWitness(); err != nil {
		return nil, err
	}
	if err := v.openLegs(ctx); err != nil {
		return nil, err
	}
	if err := v.recover(ctx); err != nil {
		v.closeLegs()
		return nil, err
	}
	if err := v.openParity(ctx); err != nil {
		v.closeLegs()
		return nil, err
	}
	if err := v.publishSeal(); err != nil {
		v.closeParity()
		v.closeLegs()
		return nil, err
	}
	return v, nil
}

// checkComplete refuses a volume that Create has not finished protecting.
func (v *Volume) checkComplete() error {
	c, err := v.tup.ScrubCursor(protectCursor)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: volume %q: never completed", ErrIncomplete, v.opts.Name)
	}
	if err != nil {
		return fmt.Errorf("blockdev: open volume %q: %w", v.opts.Name, err)
	}
	if c.Pass < 1 {
		return fmt.Errorf("%w: volume %q: protected up to block %d of %d", ErrIncomplete, v.opts.Name, c.Next, v.blocks)
	}
	return nil
}

// newVolume checks tup's manifest against dev and opts and builds a
// Volume.
func newVolume(dev device.Device, tup *store.Tuples, opts Options) (*Volume, error) {
	m := tup.Manifest()
	name := tup.Volume()
	mismatch := func(field, stored, given string) error {
		return &MismatchError{Volume: name, Field: field, Stored: stored, Given: given}
	}
	// The store keeps the manifest's format and tags without interpreting
	// them; one that no volume could have written is a damaged store
	// (store.ErrCorrupt), not a reason to fail every block.
	corrupt := func(format string, args ...any) error {
		return &store.CorruptError{Volume: name, Record: "manifest", Reason: fmt.Sprintf(format, args...)}
	}
	f, err := dif.Parse(m.Format)
	if err != nil {
		return nil, corrupt("format %q: %v", m.Format, err)
	}
	if f.Layout() != dif.Separate || f.MetadataSize() != f.TupleSize() || f.Type() == dif.Type0 {
		return nil, corrupt("format %q is not a DIX format with metadata = tuple", m.Format)
	}
	if b := f.RefTagBits(); b < 64 && m.InitialRefTag>>b != 0 {
		return nil, corrupt("initial ref tag %#x does not fit the format's %d-bit ref tag", m.InitialRefTag, b)
	}
	switch {
	case m.BlockSize != f.BlockSize():
		return nil, mismatch("block size", strconv.Itoa(m.BlockSize), strconv.Itoa(f.BlockSize())+" (format)")
	case m.TupleSize != f.TupleSize():
		return nil, mismatch("tuple size", strconv.Itoa(m.TupleSize), strconv.Itoa(f.TupleSize())+" (format)")
	case m.DeviceSize != dev.Size():
		return nil, mismatch("device size", strconv.FormatInt(m.DeviceSize, 10), strconv.FormatInt(dev.Size(), 10))
	case opts.DeviceID != "" && opts.DeviceID != m.DeviceID:
		return nil, mismatch("device id", strconv.Quote(m.DeviceID), strconv.Quote(opts.DeviceID))
	case f.BlockSize()%dev.LogicalBlockSize() != 0:
		return nil, mismatch("block size", strconv.Itoa(f.BlockSize()), "not a multiple of the device's "+strconv.Itoa(dev.LogicalBlockSize())+"-byte logical blocks")
	}
	opts.Name = name
	if err := opts.normalize(f.BlockSize()); err != nil {
		return nil, err
	}
	opts.RepairSources = slices.Clip(opts.RepairSources)
	v := &Volume{
		dev: dev, tup: tup, man: m, opts: opts,
		blocks:     m.Blocks(),
		blockCheck: manifestCheck(f, m),
	}
	v.stg = newStaging(dev, tup, &v.blockCheck, &v.opts, &v.fails, &v.st)
	v.chunk = max(1, (1<<20)/v.bs)
	if m, ok := dev.(device.Mapper); ok && !opts.NoMap {
		v.mapper = m
	}
	tup.SetPageCache(max(0, opts.TupleCacheBytes))
	v.locks.init()
	v.leave = v.closeMu.RUnlock
	v.scratch.New = func() any { return v.newScratch() }
	if err := v.setupKeyed(opts.Key); err != nil {
		return nil, err
	}
	if err := v.checkSources(opts.RepairSources); err != nil {
		return nil, err
	}
	return v, nil
}

// enter starts an operation: it holds closeMu shared until the returned
// function is called, and fails on a closed or failed volume.
func (v *Volume) enter() (func(), error) {
	v.closeMu.RLock()
	if v.closed {
		v.closeMu.RUnlock()
		return nil, device.ErrClosed
	}
	if err := v.failed(); err != nil {
		v.closeMu.RUnlock()
		return nil, err
	}
	return v.leave, nil
}

// failed returns the sticky failure, if any.
func (v *Volume) failed() error { return v.fails.err() }

// fail records err as the volume's sticky failure and returns it wrapped.
func (v *Volume) fail(err error) error { return v.fails.set(err) }

// BlockSize returns the data bytes per block.
func (v *Volume) BlockSize() int { return v.bs }

// Blocks returns the number of blocks.
func (v *Volume) Blocks() int64 { return v.blocks }

// Size returns the size in bytes.
func (v *Volume) Size() int64 { return v.blocks * int64(v.bs) }

// Format returns the PI format (DIX layout, metadata = tuple).
func (v *Volume) Format() dif.Format { return v.f }

// Manifest returns the volume's manifest as stored.
func (v *Volume) Manifest() store.Manifest { return v.man }

// Tuples returns the volume's tuple store, for its findings log and scrub
// cursors. Do not write tuples through it while the volume is open.
func (v *Volume) Tuples() *store.Tuples { return v.tup }

// Device returns the protected device.
func (v *Volume) Device() device.Device { return v.dev }

// Stats returns the volume's counters.
func (v *Volume) Stats() Stats {
	cs := v.tup.PageCacheStats()
	return Stats{
		ReadBlocks: v.st.read.Load(), WrittenBlocks: v.st.written.Load(),
		Rereads: v.st.rereads.Load(), Transient: v.st.transient.Load(), Failed: v.st.failed.Load(),
		Flushes: v.st.flushes.Load(), Syncs: v.st.syncs.Load(), AutoSyncs: v.st.autoSyncs.Load(),
		MapFaults: v.st.mapFaults.Load(), SplitRuns: v.st.splitRuns.Load(), Recovery: v.recovery,
		Repaired: v.st.repaired.Load(), Unrepairable: v.st.unrepairable.Load(),
		TupleCacheHits: cs.Hits, TupleCacheMisses: cs.Misses,
	}
}

// Close syncs the volume (see Sync) and releases it. It closes neither the
// device nor the store. A failed volume is released without syncing and
// Close returns its failure.
func (v *Volume) Close() error {
	v.closeMu.Lock()
	defer v.closeMu.Unlock()
	if v.closed {
		return device.ErrClosed
	}
	v.closed = true
	defer v.closeLegs()
	defer v.closeParity()
	if err := v.failed(); err != nil {
		return err
	}
	v.stg.flushMu.Lock()
	defer v.stg.flushMu.Unlock()
	if err := v.stg.syncLocked(); err != nil {
		return err
	}
	return v.publishSeal()
}

// Sync makes every write completed before it durable together with its
// tuples: it writes out the staged data (intents first), syncs the device,
// then commits the new tuples.
func (v *Volume) Sync() error {
	done, err := v.enter()
	if err != nil {
		return err
	}
	defer done()
	v.stg.flushMu.Lock()
	defer v.stg.flushMu.Unlock()
	if err := v.stg.syncLocked(); err != nil {
		return err
	}
	return v.publishSeal()
}
