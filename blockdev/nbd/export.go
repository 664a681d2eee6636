package nbd

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/difctl/difctl/blockdev/internal/nbdproto"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/scrub"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// export is an Export being served: its volume and what its connections
// share.
type export struct {
	Export
	size        int64
	bs          int // the volume's protection interval
	lbs         int // the device's logical block size
	maxPay      int
	flags       uint16
	maxConns    int64
	idleTimeout time.Duration // Options.IdleTimeout; <= 0: never evict for idleness

	mu     sync.Mutex         // guards active
	active map[*conn]struct{} // connections holding a transmission slot (limits.go)

	// Writes since the last Sync (BLOCK_STATUS reads the committed
	// tuples, so it syncs first when writes are pending).
	writeGen, syncedGen atomic.Int64

	findMu   sync.Mutex
	findings *scrub.StoreState
	onFail   func(Failure)
}

func newExport(e Export, o *Options) (*export, error) {
	v := e.Volume
	if e.FindingsName == "" {
		e.FindingsName = "nbd"
	}
	st, err := scrub.NewStoreState(v.Tuples(), e.FindingsName)
	if err != nil {
		return nil, fmt.Errorf("nbd: export %q: %w", e.Name, err)
	}
	switch {
	case e.TupleCacheBytes == 0:
		v.Tuples().SetPageCache(DefaultTupleCacheBytes)
	case e.TupleCacheBytes > 0:
		v.Tuples().SetPageCache(e.TupleCacheBytes)
	}
	lbs := v.Device().LogicalBlockSize()
	if lbs <= 0 || lbs > 1<<16 || bits.OnesCount(uint(lbs)) != 1 {
		return nil, fmt.Errorf("nbd: export %q: logical block size %d is not a power of two up to 64 KiB", e.Name, lbs)
	}
	x := &export{Export: e, size: v.Size(), bs: v.BlockSize(), lbs: lbs, maxPay: o.MaxPayload,
		maxConns: int64(o.MaxConnections), idleTimeout: o.IdleTimeout, active: make(map[*conn]struct{}),
		findings: st, onFail: o.OnFailure}
	// One Volume serves every connection of the export, and its Sync
	// makes every write through it durable, whichever connection made
	// it: so FLUSH and FUA on one connection cover all of them, which is
	// what CAN_MULTI_CONN promises.
	x.flags = nbdproto.FlagHasFlags | nbdproto.FlagSendFlush | nbdproto.FlagCanMultiConn
	if e.ReadOnly {
		x.flags |= nbdproto.FlagReadOnly
	} else {
		x.flags |= nbdproto.FlagSendFUA | nbdproto.FlagSendTrim | nbdproto.FlagSendWriteZeroes | nbdproto.FlagSendFastZero
	}
	return x, nil
}

// blockSizes returns the NBD_INFO_BLOCK_SIZE triple: the device's logical
// block size (the smallest unit a client may address efficiently), the
// protection interval (writes of whole blocks need no read-modify-write)
// and the max payload.
func (x *export) blockSizes() (minimum, preferred, maximum uint32) {
	pref := max(x.bs, x.lbs, 512)
	return uint32(x.lbs), uint32(pref), uint32(x.maxPay)
}

// sync makes every completed write durable (FLUSH, FUA).
func (x *export) sync() error {
	gen := x.writeGen.Load()
	if err := x.Volume.Sync(); err != nil {
		return err
	}
	for {
		old := x.syncedGen.Load()
		if old >= gen || x.syncedGen.CompareAndSwap(old, gen) {
			return nil
		}
	}
}

func (x *export) wrote() { x.writeGen.Add(1) }

// failure records the findings of a read or write refused with err and
// tells Options.OnFailure.
func (x *export) failure(op string, off, n int64, err error) {
	f := Failure{Export: x.Name, Op: op, Offset: off, Length: n, Err: err}
	var fs []scrub.Finding
	var ie *blockdev.IntegrityError
	var ioe *device.IOError
	now := time.Now().UTC()
	switch {
	case errors.As(err, &ie):
		for _, p := range ie.Problems {
			if p.Transient {
				continue
			}
			fs = append(fs, scrub.FindingOf(p, now))
		}
	case errors.As(err, &ioe) && !errors.Is(err, device.ErrClosed) && !errors.Is(err, blockdev.ErrVolumeFailed):
		// ReadAt stops at the block it could not read: off is its
		// first byte (or inside it, for an unaligned request).
		fs = append(fs, scrub.FindingOf(blockdev.Problem{LBA: off / int64(x.bs), Kind: blockdev.KindIO, Err: ioe}, now))
	}
	if len(fs) > 0 {
		x.findMu.Lock()
		var errs []error
		for _, fd := range fs {
			errs = append(errs, x.findings.RecordFinding(scrub.Cursor{}, fd))
		}
		errs = append(errs, x.findings.Sync())
		x.findMu.Unlock()
		f.Findings, f.RecordErr = fs, errors.Join(errs...)
	}
	if x.onFail != nil {
		x.onFail(f)
	}
}

// isDataError reports whether err is about the volume's data (an integrity
// failure or an unreadable block): the request gets EIO and a finding.
func isDataError(err error) bool {
	var ioe *device.IOError
	return errors.Is(err, dif.ErrIntegrity) || errors.As(err, &ioe) && !errors.Is(err, device.ErrClosed)
}

// maxStatusBlocks bounds the blocks one BLOCK_STATUS looks at, and
// maxExtents the descriptors of its reply; the client asks again for the
// rest.
const (
	maxStatusBlocks = 1 << 17
	maxExtents      = 1024
)

// extent is one base:allocation descriptor.
type extent struct {
	length uint32
	flags  uint32
}

// status returns the base:allocation extents of [off, off+n): written
// blocks as allocated data (0), unwritten or discarded ones as holes that
// read as zeros. Pending writes are synced first, since only committed
// tuples say which blocks are written. It may cover less than n (never
// nothing); with one set, at most one extent.
func (x *export) status(off, n int64, one bool, scratch *statusScratch) ([]extent, error) {
	if x.writeGen.Load() != x.syncedGen.Load() {
		if err := x.sync(); err != nil {
			return nil, err
		}
	}
	bs := int64(x.bs)
	first := off / bs
	// At most 2 GiB, so that every length fits its 32 bits.
	last := min((off+n+bs-1)/bs, first+min(maxStatusBlocks, (1<<31)/bs))
	nb := int(last - first)
	t := x.Volume.Tuples()
	ts := t.TupleSize()
	scratch.grow(nb, ts)
	if _, err := t.ReadRange(first, scratch.tuples[:nb*ts], nil, scratch.written); err != nil {
		return nil, err
	}
	end := min(off+n, last*bs)
	var out []extent
	pos := off
	for pos < end {
		i := int(pos/bs - first)
		w := scratch.written.Has(i)
		j := i + 1
		for j < nb && scratch.written.Has(j) == w && (first+int64(j))*bs < end {
			j++
		}
		stop := min((first+int64(j))*bs, end)
		var fl uint32
		if !w {
			fl = nbdproto.StateHole | nbdproto.StateZero
		}
		if len(out) > 0 && out[len(out)-1].flags == fl {
			out[len(out)-1].length += uint32(stop - pos)
		} else {
			out = append(out, extent{length: uint32(stop - pos), flags: fl})
		}
		pos = stop
		if one || len(out) >= maxExtents {
			break
		}
	}
	return out, nil
}

// statusScratch is a connection's buffers for BLOCK_STATUS.
type statusScratch struct {
	tuples  []byte
	written store.Bitmap
}

func (s *statusScratch) grow(n, ts int) {
	if len(s.tuples) < n*ts {
		s.tuples = make([]byte, n*ts)
	}
	if len(s.written)*64 < n {
		s.written = store.NewBitmap(n)
	}
}
