package nvme

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/dif"
)

// A Device is an NVMe namespace that carries protection information,
// opened by Open: its format (Identify Namespace, as a dif.Format), the
// kernel's view of it (sysfs), and reads and writes of blocks with their
// metadata through passthrough, cut into commands the controller and the
// kernel accept. A Device is safe for concurrent use.
type Device struct {
	f         *os.File
	path      string
	ns        Namespace
	format    dif.Format
	integrity Integrity
	maxBlocks int // blocks per command
}

// Open opens the NVMe namespace at path (its block device, /dev/nvmeXnY)
// read-only, or read-write with write, and reads its format. The errors:
// a file that is no NVMe namespace (ErrNotNVMe, also off Linux), a
// passthrough refused (ErrDenied), a namespace without metadata
// (ErrNoMetadata), with metadata but no PI (ErrNoPI), in a format dif
// cannot describe (*UnsupportedFormatError), and a kernel whose integrity
// profile of the namespace contradicts Identify Namespace
// (*IntegrityMismatchError).
func Open(path string, write bool) (*Device, error) {
	flag := os.O_RDONLY
	if write {
		flag = os.O_RDWR
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return nil, err
	}
	d, err := open(f, path)
	if err != nil {
		f.Close()
		return nil, err
	}
	return d, nil
}

func open(f *os.File, path string) (*Device, error) {
	ns, err := IdentifyNamespace(f)
	if err != nil {
		return nil, err
	}
	format, err := ns.Format()
	if err != nil {
		return nil, err
	}
	d := &Device{f: f, path: path, ns: ns, format: format}
	name, err := blockName(f)
	if err != nil {
		return nil, err
	}
	if d.integrity, err = ReadIntegrity(name); err != nil {
		return nil, err
	}
	if err := d.integrity.Check(ns); err != nil {
		return nil, err
	}
	d.maxBlocks = maxBlocks(name, format)
	return d, nil
}

// Path returns the path the device was opened at.
func (d *Device) Path() string { return d.path }

// Namespace returns what Identify Namespace said of the namespace.
func (d *Device) Namespace() Namespace { return d.ns }

// Format returns the namespace's PI format, in the layout of its
// transfers (see Namespace.Format).
func (d *Device) Format() dif.Format { return d.format }

// Integrity returns the kernel's integrity profile of the namespace.
func (d *Device) Integrity() Integrity { return d.integrity }

// Blocks returns the namespace's size in blocks.
func (d *Device) Blocks() int64 { return int64(d.ns.Blocks) }

// BlockSize returns the data bytes per block.
func (d *Device) BlockSize() int { return d.ns.LBASize }

// MetaSize returns the metadata bytes per block.
func (d *Device) MetaSize() int { return d.ns.MetadataSize }

// Interleaved reports whether blocks are transferred with their metadata
// after each block's data (extended LBAs) rather than in a separate
// buffer.
func (d *Device) Interleaved() bool { return d.ns.Extended }

// MaxBlocks returns the blocks of one command, within the controller's and
// the kernel's transfer limits.
func (d *Device) MaxBlocks() int { return d.maxBlocks }

// Flush makes the blocks written durable: fsync of the block device, which
// sends the controller a Flush where it has a volatile write cache.
func (d *Device) Flush() error {
	if err := d.f.Sync(); err != nil {
		return fmt.Errorf("nvme: flush %s: %w", d.path, err)
	}
	return nil
}

// Close closes the device.
func (d *Device) Close() error { return d.f.Close() }

// bufs checks the buffers of n blocks and returns the bytes per block of
// data and of md in the device's layout.
func (d *Device) bufs(op string, lba int64, n int, data, md []byte) (ds, ms int, err error) {
	if lba < 0 || n < 0 || lba > d.Blocks() || int64(n) > d.Blocks()-lba {
		return 0, 0, fmt.Errorf("nvme: %s of %d blocks at %d, of %d: %w", op, n, lba, d.Blocks(), device.ErrOutOfRange)
	}
	ds, ms = d.ns.LBASize, d.ns.MetadataSize
	if d.ns.Extended {
		ds, ms = ds+ms, 0
	}
	if len(data) < n*ds || len(md) < n*ms {
		return 0, 0, fmt.Errorf("nvme: %s: buffers of %d and %d bytes cannot hold %d blocks of %d+%d bytes", op, len(data), len(md), n, ds, ms)
	}
	return ds, ms, nil
}

// ReadBlocks reads blocks [lba, lba+n) with their metadata, as stored
// (PRINFO 0: the controller checks nothing): for extended LBAs their n
// sectors of data and metadata into data[:n*(BlockSize+MetaSize)] (md is
// not used), otherwise their data into data[:n*BlockSize] and their
// metadata into md[:n*MetaSize]. Blocks out of the namespace give an error
// wrapping device.ErrOutOfRange; a closed device one wrapping
// os.ErrClosed.
func (d *Device) ReadBlocks(lba int64, n int, data, md []byte) error {
	ds, ms, err := d.bufs("read", lba, n, data, md)
	if err != nil {
		return err
	}
	for n > 0 {
		k := min(n, d.maxBlocks)
		if err := Read(d.f, d.ns.ID, uint64(lba), k, data[:k*ds], md[:k*ms]); err != nil {
			return err
		}
		lba, n, data, md = lba+int64(k), n-k, data[k*ds:], md[k*ms:]
	}
	return nil
}

// WriteBlocks writes blocks [lba, lba+n) with the PI in their metadata
// (laid out as for ReadBlocks), with PRACT clear and every PRCHK bit set:
// the controller checks each block's guard, its app tag (against p.AppTag
// under p.AppMask) and, for Types 1 and 2, its ref tag (the low bits of
// p.RefTag + lba; Type 3 has no ref tag check) before it stores anything. A block it refuses is reported
// as a *WriteCheckError (matching dif.ErrIntegrity and the field's
// sentinel) naming the LBA: the blocks of the failing command before it
// may have been written, those after it were not. The page cache's copies
// of the blocks written are dropped (dropCache), since passthrough
// bypasses it.
func (d *Device) WriteBlocks(lba int64, n int, data, md []byte, p dif.Params) error {
	ds, ms, err := d.bufs("write", lba, n, data, md)
	if err != nil {
		return err
	}
	bs := int64(d.ns.LBASize)
	for n > 0 {
		k := min(n, d.maxBlocks)
		err := d.write(lba, k, data[:k*ds], md[:k*ms], p)
		// The blocks may have changed even when a later block of the
		// command was refused.
		dropCache(d.f, lba*bs, int64(k)*bs)
		if err != nil {
			return err
		}
		lba, n, data, md = lba+int64(k), n-k, data[k*ds:], md[k*ms:]
	}
	return nil
}

// write writes one command's blocks; a command the controller refuses with
// an end-to-end error is written again block by block to find the block.
func (d *Device) write(lba int64, n int, data, md []byte, p dif.Params) error {
	err := Write(d.f, d.ns.ID, uint64(lba), n, data, md, d.protection(lba, p))
	var se *StatusError
	if err == nil || !errors.As(err, &se) || se.Field() == 0 {
		return err
	}
	if n == 1 {
		return &WriteCheckError{LBA: lba, Field: se.Field(), Err: se}
	}
	ds, ms := len(data)/n, len(md)/n
	for i := range n {
		if err := d.write(lba+int64(i), 1, data[i*ds:(i+1)*ds], md[i*ms:(i+1)*ms], p); err != nil {
			return err
		}
	}
	// Every block passed alone: the command's failure is reported as it
	// came, at its first block.
	return &WriteCheckError{LBA: lba, Field: se.Field(), Err: se}
}

// protection is the Protection of a checked write of blocks from lba. A
// Type 3 namespace has no ref tag check: its PRCHK ref bit must be clear
// (a controller refuses it with Invalid Protection Information).
func (d *Device) protection(lba int64, p dif.Params) Protection {
	q := d.format.ParamsAt(p, lba)
	prot := CheckAll(q.RefTag, q.AppTag, q.AppMask)
	prot.RefTag = d.format.Type() != dif.Type3
	return prot
}

// A WriteCheckError is a write that the controller refused because a
// block's PI failed its end-to-end check (a *StatusError with a Status
// Code of 0x82 to 0x84). It matches dif.ErrIntegrity and the sentinel of
// the field, as difctl's own *dif.CheckError does.
type WriteCheckError struct {
	LBA   int64
	Field dif.Field
	Err   *StatusError
}

func (e *WriteCheckError) Error() string {
	return fmt.Sprintf("nvme: the device refused the write of LBA %d: its %s check failed (status %#x)", e.LBA, e.Field, e.Err.Status)
}

// Unwrap returns the *StatusError, which unwraps to the field's sentinel.
func (e *WriteCheckError) Unwrap() error { return e.Err }

// WriteData writes b at byte offset off of the namespace with PI that it
// generates with package dif (params p of block 0, as a check of the
// device reads them: for Types 1 and 2 block lba carries the ref tag
// p.RefTag+lba; the app tag p.AppTag), and has the device check every
// tuple as it stores it (WriteBlocks: PRACT clear, PRCHK guard, app tag
// under p.AppMask, ref tag). A block that b covers in part is read first
// and must pass its check with params check (or be unwritten or escaped):
// otherwise nothing is written and the error is its *dif.CheckError. The metadata bytes
// outside the tuple are kept for such a block and zero for the blocks b
// covers whole. The run is written as one or more commands; a refused
// block is a *WriteCheckError, with the blocks before it written.
func (d *Device) WriteData(b []byte, off int64, p, check dif.Params) error {
	bs := int64(d.ns.LBASize)
	if off < 0 || int64(len(b)) > d.Blocks()*bs-off || off > d.Blocks()*bs {
		return fmt.Errorf("nvme: write of %d bytes at %d, of %d: %w", len(b), off, d.Blocks()*bs, device.ErrOutOfRange)
	}
	if len(b) == 0 {
		return nil
	}
	fs := d.format.WithLayout(dif.Separate)
	lba0, end := off/bs, (off+int64(len(b))+bs-1)/bs
	k := int(end - lba0)
	ms := d.ns.MetadataSize
	data, md := make([]byte, k*int(bs)), make([]byte, k*ms)
	edge := func(i int) error {
		lba := lba0 + int64(i)
		bd, bm := data[i*int(bs):(i+1)*int(bs)], md[i*ms:(i+1)*ms]
		if err := d.readSeparate(lba, bd, bm); err != nil {
			return err
		}
		var states [1]dif.State
		if _, err := fs.Classify(&dif.Classification{States: states[:]}, bd, bm, fs.ParamsAt(check, lba)); err != nil {
			return fmt.Errorf("nvme: %w", err)
		}
		if states[0] == dif.StateFailed {
			return fs.Verify(bd, bm, fs.ParamsAt(check, lba))
		}
		return nil
	}
	if off%bs != 0 {
		if err := edge(0); err != nil {
			return err
		}
	}
	if (off+int64(len(b)))%bs != 0 && (k > 1 || off%bs == 0) {
		if err := edge(k - 1); err != nil {
			return err
		}
	}
	copy(data[off%bs:], b)
	if err := fs.Generate(data, md, fs.ParamsAt(p, lba0)); err != nil {
		return fmt.Errorf("nvme: %w", err)
	}
	if d.ns.Extended {
		ext := make([]byte, k*(int(bs)+ms))
		if err := fs.ToInterleaved(ext, data, md); err != nil {
			return fmt.Errorf("nvme: %w", err)
		}
		return d.WriteBlocks(lba0, k, ext, nil, p)
	}
	return d.WriteBlocks(lba0, k, data, md, p)
}

// readSeparate reads one block's data and metadata into data and md,
// whatever the device's layout.
func (d *Device) readSeparate(lba int64, data, md []byte) error {
	if !d.ns.Extended {
		return d.ReadBlocks(lba, 1, data, md)
	}
	ext := make([]byte, len(data)+len(md))
	if err := d.ReadBlocks(lba, 1, ext, nil); err != nil {
		return err
	}
	copy(data, ext)
	copy(md, ext[len(data):])
	return nil
}

// A RunWriter writes runs of blocks to the device given in two calls, the
// data of a run and then its PI (blockdev.ExportVolume writes a DIX pair
// so, through its ExportDest's Data and Meta), with the device checking
// every tuple as WriteBlocks does. The namespace's metadata must be the
// tuple alone. Data must be called first for each run, at a block
// boundary; Meta then writes the run. Not safe for concurrent use.
type RunWriter struct {
	d       *Device
	p       dif.Params
	pending []byte
	lba     int64 // of the pending data; -1: none
	ext     []byte
}

// NewRunWriter returns a RunWriter of d whose blocks carry the PI of
// params p (their ref tags from p.RefTag, their app tags checked under
// p.AppMask). A namespace with more metadata than its tuple is refused.
func (d *Device) NewRunWriter(p dif.Params) (*RunWriter, error) {
	if d.ns.MetadataSize != d.format.TupleSize() {
		return nil, fmt.Errorf("nvme: namespace %d keeps %d bytes of metadata per block, more than its %d-byte tuple: runs of tuples alone cannot fill it",
			d.ns.ID, d.ns.MetadataSize, d.format.TupleSize())
	}
	return &RunWriter{d: d, p: p, lba: -1}, nil
}

// Data returns the writer of a run's data.
func (w *RunWriter) Data() io.WriterAt { return runData{w} }

// Meta returns the writer of a run's tuples, which writes the run.
func (w *RunWriter) Meta() io.WriterAt { return runMeta{w} }

type runData struct{ w *RunWriter }

func (r runData) WriteAt(b []byte, off int64) (int, error) {
	bs := int64(r.w.d.ns.LBASize)
	if off%bs != 0 || int64(len(b))%bs != 0 {
		return 0, fmt.Errorf("nvme: run of %d bytes at %d is not whole blocks of %d", len(b), off, bs)
	}
	r.w.pending = append(r.w.pending[:0], b...)
	r.w.lba = off / bs
	return len(b), nil
}

type runMeta struct{ w *RunWriter }

func (r runMeta) WriteAt(md []byte, off int64) (int, error) {
	w := r.w
	bs, ts := w.d.ns.LBASize, w.d.ns.MetadataSize
	n := len(w.pending) / bs
	if w.lba < 0 || off != w.lba*int64(ts) || len(md) != n*ts {
		return 0, fmt.Errorf("nvme: %d bytes of tuples at %d do not follow the data of %d blocks at LBA %d", len(md), off, n, w.lba)
	}
	lba := w.lba
	w.lba = -1
	if !w.d.ns.Extended {
		if err := w.d.WriteBlocks(lba, n, w.pending, md, w.p); err != nil {
			return 0, err
		}
		return len(md), nil
	}
	if cap(w.ext) < n*(bs+ts) {
		w.ext = make([]byte, n*(bs+ts))
	}
	ext := w.ext[:n*(bs+ts)]
	if err := w.d.format.ToInterleaved(ext, w.pending, md); err != nil {
		return 0, fmt.Errorf("nvme: %w", err)
	}
	if err := w.d.WriteBlocks(lba, n, ext, nil, w.p); err != nil {
		return 0, err
	}
	return len(md), nil
}
