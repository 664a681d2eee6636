package nvme

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/dif"
)

// A VolumeDevice is a namespace that carries PI as the device.Device of a
// store-backed protected volume (package blockdev) whose format is the
// namespace's: the volume writes its blocks through WriteWithPI (the
// device.PIWriter capability) with the tuples it generated and records in
// its store, and the device stores them as the blocks' PI after checking
// each one (PRACT clear, PRCHK guard, app tag and, for Types 1 and 2, ref
// tag: WriteBlocks). So the tuples travel with the data end to end, and a
// block whose data or tuple changed on the way is refused rather than
// stored (a *WriteCheckError, matching dif.ErrIntegrity). The store keeps
// what the metadata cannot hold: the sector CRC-32Cs and keyed tags.
//
// Reads go through passthrough too (PRINFO 0: the controller checks
// nothing; the volume checks every block against its store), so that they
// never see a page cache that the passthrough writes bypassed. WriteAt,
// for callers that have no tuples (a repair, a discard's zeros), generates
// the PI with package dif from the volume's parameters, as the volume
// would, and has the device check it the same way (Device.WriteData).
// A VolumeDevice is safe for concurrent use.
type VolumeDevice struct {
	d      *Device
	f      dif.Format // the volume's format (separate layout)
	p      dif.Params // of block 0, app tag checked exactly
	check  dif.Params // of block 0, the edge blocks of WriteAt (the volume's app tag mask)
	size   int64
	closed atomic.Bool
}

// A FormatMismatchError reports a volume whose PI cannot be the PI of a
// namespace: its format differs from the namespace's, or, on a Type 1
// namespace, its ref tags do not start at 0 (a Type 1 namespace's ref
// tags are the low bits of the LBAs: the controller refuses any other).
type FormatMismatchError struct {
	Namespace uint32
	Device    dif.Format // the namespace's
	Volume    dif.Format
	RefTag    uint64 // the volume's initial ref tag
	Reason    string
}

func (e *FormatMismatchError) Error() string {
	return fmt.Sprintf("nvme: namespace %d (%s) cannot carry the PI of a volume in %s: %s",
		e.Namespace, e.Device.WithLayout(dif.Interleaved), e.Volume.WithLayout(dif.Interleaved), e.Reason)
}

// VolumeDevice returns d as the device of a protected volume of format f
// (any layout: the volume keeps its tuples apart) whose block 0 carries
// the params p (p.RefTag, p.AppTag; p.AppMask is the bits the volume's
// reads check, used for the blocks WriteAt covers in part). f must equal
// the namespace's format but for the layout (*FormatMismatchError), and a
// Type 1 volume's ref tags must start at 0. d must be open for writing;
// the VolumeDevice closes it.
func (d *Device) VolumeDevice(f dif.Format, p dif.Params) (*VolumeDevice, error) {
	mismatch := func(reason string) error {
		return &FormatMismatchError{Namespace: d.ns.ID, Device: d.format, Volume: f, RefTag: p.RefTag, Reason: reason}
	}
	fs := f.WithLayout(dif.Separate)
	switch {
	case fs != d.format.WithLayout(dif.Separate):
		return nil, mismatch("the formats differ")
	case fs.Type() == dif.Type1 && p.RefTag != 0:
		return nil, mismatch(fmt.Sprintf("the volume starts its ref tags at %#x; a Type 1 namespace's are its LBAs", p.RefTag))
	case p.AppTag == 0xFFFF:
		return nil, mismatch("app tag 0xffff is the escape, with which the controller checks nothing")
	}
	q := p
	q.AppMask = 0xffff
	return &VolumeDevice{d: d, f: fs, p: q, check: p, size: d.Blocks() * int64(d.BlockSize())}, nil
}

// Device returns the namespace.
func (v *VolumeDevice) Device() *Device { return v.d }

// Size returns the namespace's data bytes.
func (v *VolumeDevice) Size() int64 { return v.size }

// LogicalBlockSize returns the namespace's data bytes per block.
func (v *VolumeDevice) LogicalBlockSize() int { return v.d.BlockSize() }

// PhysicalBlockSize returns the namespace's data bytes per block: every
// command writes whole blocks with their PI.
func (v *VolumeDevice) PhysicalBlockSize() int { return v.d.BlockSize() }

// ioPiece is the most data bytes one step of ReadAt moves through its
// buffers.
const ioPiece = 1 << 20

func (v *VolumeDevice) alive(op string, off, n int64) error {
	if v.closed.Load() {
		return fmt.Errorf("nvme: %s %s: %w", op, v.d.path, device.ErrClosed)
	}
	return device.CheckRange(op, off, n, v.size)
}

// ReadAt reads len(b) bytes at off, the data of the blocks without their
// metadata, through passthrough with the controller's checks off.
func (v *VolumeDevice) ReadAt(b []byte, off int64) (int, error) {
	if err := v.alive("read", off, int64(len(b))); err != nil {
		return 0, err
	}
	bs := int64(v.d.BlockSize())
	ds, ms := int(bs), v.d.MetaSize()
	if v.d.Interleaved() {
		ds, ms = ds+ms, 0
	}
	per := max(1, ioPiece/int(bs))
	var data, md []byte
	done := 0
	for done < len(b) {
		pos := off + int64(done)
		lba := pos / bs
		k := int(min(int64(per), (pos+int64(len(b)-done)+bs-1)/bs-lba))
		if data == nil {
			// The first piece is the largest.
			data, md = make([]byte, k*ds), make([]byte, k*ms)
		}
		if err := v.d.ReadBlocks(lba, k, data, md); err != nil {
			return done, &device.IOError{Op: "read", Off: pos, Len: int64(len(b) - done), Err: err}
		}
		for i := range k {
			blk := data[i*ds : i*ds+int(bs)]
			start := (lba + int64(i)) * bs
			lo := max(pos, start) - start
			c := copy(b[done:], blk[lo:])
			done += c
			pos += int64(c)
			if done == len(b) {
				break
			}
		}
	}
	return done, nil
}

// WriteAt writes b at off with PI generated by package dif from the
// volume's params (Device.WriteData), which the device checks; a block b
// covers in part is read and checked first.
func (v *VolumeDevice) WriteAt(b []byte, off int64) (int, error) {
	if err := v.alive("write", off, int64(len(b))); err != nil {
		return 0, err
	}
	if err := v.d.WriteData(b, off, v.p, v.check); err != nil {
		return 0, v.writeError(err, off, len(b))
	}
	return len(b), nil
}

// WriteWithPI writes the whole blocks of data at off (a multiple of the
// block size) with tuples, one of the volume's tuple size per block, as
// their PI: the device checks each tuple against its block and the
// expected tags before it stores it. A tuple it refuses is a
// *WriteCheckError naming the block (matching dif.ErrIntegrity and the
// field's sentinel); the blocks before it may have been written, those
// after it were not.
func (v *VolumeDevice) WriteWithPI(data, tuples []byte, off int64) error {
	if err := v.alive("write", off, int64(len(data))); err != nil {
		return err
	}
	bs, ts := v.d.BlockSize(), v.f.TupleSize()
	if err := device.CheckAligned("write", off, int64(len(data)), bs); err != nil {
		return err
	}
	n := len(data) / bs
	if len(tuples) != n*ts {
		return fmt.Errorf("nvme: write of %d blocks with %d bytes of %d-byte tuples", n, len(tuples), ts)
	}
	lba := off / int64(bs)
	if !v.d.Interleaved() {
		return v.writeError(v.d.WriteBlocks(lba, n, data, tuples, v.p), off, len(data))
	}
	per := max(1, ioPiece/bs)
	ext := make([]byte, min(n, per)*(bs+ts))
	for i := 0; i < n; i += per {
		k := min(per, n-i)
		e := ext[:k*(bs+ts)]
		if err := v.f.ToInterleaved(e, data[i*bs:(i+k)*bs], tuples[i*ts:(i+k)*ts]); err != nil {
			return fmt.Errorf("nvme: %w", err)
		}
		if err := v.d.WriteBlocks(lba+int64(i), k, e, nil, v.p); err != nil {
			return v.writeError(err, off+int64(i*bs), len(data)-i*bs)
		}
	}
	return nil
}

// writeError keeps the integrity errors (a tuple refused, a block read
// back failing) as they are, for the volume to classify, and makes the
// rest *device.IOErrors.
func (v *VolumeDevice) writeError(err error, off int64, n int) error {
	if err == nil || errors.Is(err, dif.ErrIntegrity) || errors.Is(err, device.ErrOutOfRange) {
		return err
	}
	return &device.IOError{Op: "write", Off: off, Len: int64(n), Err: err}
}

// Sync makes the written blocks durable (Device.Flush).
func (v *VolumeDevice) Sync() error {
	if v.closed.Load() {
		return fmt.Errorf("nvme: sync %s: %w", v.d.path, device.ErrClosed)
	}
	return v.d.Flush()
}

// Close closes the namespace.
func (v *VolumeDevice) Close() error {
	if v.closed.Swap(true) {
		return fmt.Errorf("nvme: close %s: %w", v.d.path, device.ErrClosed)
	}
	return v.d.Close()
}
