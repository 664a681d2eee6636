package device

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// FileOptions configures [OpenFile] and [CreateImage].
type FileOptions struct {
	// ReadOnly opens the device for reading only: writes and discards fail
	// with ErrReadOnly. Default: read-write.
	ReadOnly bool
	// BlockSize is the logical block size of an image, a power of two from
	// 512 to 65536; the image size must be a multiple of it. Default (0):
	// 512. For a block device it must be 0 or equal to the kernel's logical
	// block size.
	BlockSize int
	// Direct asks for O_DIRECT. When the filesystem refuses it (tmpfs, or a
	// direct-I/O alignment larger than BlockSize), the file is opened with
	// buffered I/O instead; [File.DirectIO] tells which. Default: buffered.
	Direct bool
	// RequireDirect makes the open fail instead of falling back to buffered
	// I/O. It implies Direct. Default: false.
	RequireDirect bool
	// Exclusive opens a block device with O_EXCL, so that the open fails
	// (EBUSY) while the device is mounted or claimed by another exclusive
	// opener. Ignored for images. Default: false.
	Exclusive bool
}

// bounceSize is the size of the aligned buffers used for O_DIRECT requests
// whose caller buffer is not aligned.
const bounceSize = 1 << 20

var bouncePool = sync.Pool{New: func() any {
	b := AlignedBuffer(bounceSize)
	return &b
}}

// testHookDirect, when set by tests, is called at the "open" and "probe"
// stages of setting up O_DIRECT; a non-nil result is used as the error of
// that stage, to simulate a filesystem that refuses direct I/O.
var testHookDirect func(stage string) error

func directHook(stage string) error {
	if testHookDirect == nil {
		return nil
	}
	return testHookDirect(stage)
}

// dio holds an O_DIRECT descriptor and its alignment requirements.
type dio struct {
	f        *os.File
	memAlign int   // buffer address alignment
	offAlign int64 // file offset and length alignment
}

// File is a [Device] over an image file or a Linux block device.
type File struct {
	f         *os.File
	path      string
	blockDev  bool
	readOnly  bool
	size      int64
	lbs, pbs  int
	direct    *dio  // non-nil when f itself is open with O_DIRECT
	directErr error // why O_DIRECT was not used, when it was asked for
	closed    atomic.Bool

	rmu     sync.Mutex // guards rdirect, rdirErr
	rdirect *dio       // lazily opened O_DIRECT reader for ReadAtDirect
	rdirErr error

	mp fileMap // for ReadMapped
}

var (
	_ Device       = (*File)(nil)
	_ Discarder    = (*File)(nil)
	_ DataFinder   = (*File)(nil)
	_ CacheDropper = (*File)(nil)
	_ DirectReader = (*File)(nil)
)

// OpenFile opens the image file or Linux block device at path.
func OpenFile(path string, opts FileOptions) (*File, error) {
	if opts.BlockSize != 0 && !validBlockSize(opts.BlockSize) {
		return nil, fmt.Errorf("blockdev: block size %d is not a power of two from 512 to 65536", opts.BlockSize)
	}
	if opts.RequireDirect {
		opts.Direct = true
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("blockdev: %w", err)
	}
	isBlock := st.Mode()&fs.ModeDevice != 0 && st.Mode()&fs.ModeCharDevice == 0
	if !isBlock && !st.Mode().IsRegular() {
		return nil, fmt.Errorf("blockdev: %s is neither a regular file nor a block device (mode %v)", path, st.Mode())
	}
	flags := os.O_RDWR
	if opts.ReadOnly {
		flags = os.O_RDONLY
	}
	if isBlock && opts.Exclusive {
		flags |= os.O_EXCL
	}

	d := &File{path: path, blockDev: isBlock, readOnly: opts.ReadOnly}
	var f *os.File
	if opts.Direct {
		if oDirect == 0 {
			d.directErr = errors.ErrUnsupported
		} else {
			if err = directHook("open"); err == nil {
				f, err = os.OpenFile(path, flags|oDirect, 0)
			}
			if errors.Is(err, syscall.EINVAL) {
				d.directErr, f, err = err, nil, nil
			} else if err != nil {
				return nil, fmt.Errorf("blockdev: %w", err)
			}
		}
		if f == nil && opts.RequireDirect {
			return nil, fmt.Errorf("blockdev: %s: direct I/O refused: %w", path, d.directErr)
		}
	}
	if f == nil {
		if f, err = os.OpenFile(path, flags, 0); err != nil {
			return nil, fmt.Errorf("blockdev: %w", err)
		}
	}
	d.f = f
	if err := d.init(opts); err != nil {
		f.Close()
		return nil, err
	}
	return d, nil
}

// init reads the geometry and settles direct I/O.
func (d *File) init(opts FileOptions) error {
	st, err := d.f.Stat()
	if err != nil {
		return fmt.Errorf("blockdev: %w", err)
	}
	switch {
	case st.Mode().IsRegular():
		if d.blockDev {
			return fmt.Errorf("blockdev: %s changed type while opening", d.path)
		}
		d.size = st.Size()
		d.lbs = opts.BlockSize
		if d.lbs == 0 {
			d.lbs = 512
		}
		d.pbs = d.lbs
		if bs := preferredIOSize(st); validBlockSize(bs) && bs > d.lbs {
			d.pbs = bs
		}
		if d.size%int64(d.lbs) != 0 {
			return fmt.Errorf("blockdev: image %s: size %d is not a multiple of the %d-byte block size", d.path, d.size, d.lbs)
		}
	case d.blockDev && st.Mode()&fs.ModeDevice != 0 && st.Mode()&fs.ModeCharDevice == 0:
		size, lbs, pbs, err := blockGeometry(d.f)
		if err != nil {
			return fmt.Errorf("blockdev: %s: %w", d.path, err)
		}
		if !validBlockSize(lbs) {
			return fmt.Errorf("blockdev: %s: kernel reports logical block size %d", d.path, lbs)
		}
		if opts.BlockSize != 0 && opts.BlockSize != lbs {
			return fmt.Errorf("blockdev: %s: block size %d asked, the device's logical block size is %d", d.path, opts.BlockSize, lbs)
		}
		if !validBlockSize(pbs) || pbs < lbs {
			pbs = lbs
		}
		if size%int64(lbs) != 0 {
			return fmt.Errorf("blockdev: %s: size %d is not a multiple of the %d-byte block size", d.path, size, lbs)
		}
		d.size, d.lbs, d.pbs = size, lbs, pbs
	default:
		return fmt.Errorf("blockdev: %s changed type while opening", d.path)
	}
	if !opts.Direct || d.directErr != nil {
		return nil
	}
	dd, err := d.probeDirect(d.f)
	if err == nil {
		d.direct = dd
		return nil
	}
	if opts.RequireDirect {
		return fmt.Errorf("blockdev: %s: direct I/O refused: %w", d.path, err)
	}
	d.directErr = err
	if err := clearDirect(d.f); err != nil {
		return fmt.Errorf("blockdev: %s: turning off direct I/O: %w", d.path, err)
	}
	return nil
}

// probeDirect checks that f, open with O_DIRECT, can serve block-aligned
// I/O and returns its alignment requirements.
func (d *File) probeDirect(f *os.File) (*dio, error) {
	dd := &dio{f: f, memAlign: MemAlign, offAlign: int64(d.lbs)}
	if mem, off, ok := dioAlign(f); ok {
		if off > d.lbs || d.lbs%off != 0 {
			return nil, fmt.Errorf("direct I/O needs %d-byte alignment, more than the %d-byte block size: %w", off, d.lbs, syscall.EINVAL)
		}
		if mem > MemAlign {
			return nil, fmt.Errorf("direct I/O needs %d-byte memory alignment: %w", mem, syscall.EINVAL)
		}
		dd.offAlign = int64(off)
		if mem > 0 {
			dd.memAlign = mem
		}
	}
	if err := directHook("probe"); err != nil {
		return nil, err
	}
	if d.size >= int64(d.lbs) {
		buf := AlignedBuffer(d.lbs)
		if _, err := f.ReadAt(buf, 0); err != nil && err != io.EOF {
			return nil, err
		}
	}
	return dd, nil
}

// Path returns the path the device was opened with.
func (d *File) Path() string { return d.path }

// IsBlockDevice reports whether the device is a block device rather than
// an image file.
func (d *File) IsBlockDevice() bool { return d.blockDev }

// DirectIO reports whether reads and writes use O_DIRECT.
func (d *File) DirectIO() bool { return d.direct != nil }

// DirectIOError returns why O_DIRECT is not in use although it was asked
// for, or nil.
func (d *File) DirectIOError() error { return d.directErr }

// Size implements [Device].
func (d *File) Size() int64 { return d.size }

// LogicalBlockSize implements [Device].
func (d *File) LogicalBlockSize() int { return d.lbs }

// PhysicalBlockSize implements [Device]. For images it is the larger of the
// block size and the filesystem's preferred I/O size.
func (d *File) PhysicalBlockSize() int { return d.pbs }

// ReadAt implements [Device].
func (d *File) ReadAt(p []byte, off int64) (int, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	if err := CheckRange("read", off, int64(len(p)), d.size); err != nil {
		return 0, err
	}
	if d.direct != nil {
		return d.direct.readAt(p, off)
	}
	return readFull(d.f, p, off)
}

// WriteAt implements [Device]. With direct I/O, off and len(p) must be
// multiples of the logical block size.
func (d *File) WriteAt(p []byte, off int64) (int, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	if d.readOnly {
		return 0, ErrReadOnly
	}
	if err := CheckRange("write", off, int64(len(p)), d.size); err != nil {
		return 0, err
	}
	if d.direct != nil {
		if err := CheckAligned("write", off, int64(len(p)), d.lbs); err != nil {
			return 0, err
		}
		return d.direct.writeAt(p, off)
	}
	return writeFull(d.f, p, off)
}

// Sync implements [Device] with fdatasync.
func (d *File) Sync() error {
	if d.closed.Load() {
		return ErrClosed
	}
	if err := fdatasync(d.f); err != nil {
		return ioErr("sync", 0, d.size, err)
	}
	return nil
}

// StartWriteback implements [WritebackStarter]: writeback of [off,
// off+n) starts now (on Linux; elsewhere it is errors.ErrUnsupported).
// With O_DIRECT there is nothing cached to write.
func (d *File) StartWriteback(off, n int64) error {
	if d.closed.Load() {
		return ErrClosed
	}
	if d.direct != nil {
		return nil
	}
	if err := startWriteback(d.f, off, n); err != nil {
		return ioErr("start writeback", off, n, err)
	}
	return nil
}

// Close implements [Device].
func (d *File) Close() error {
	if d.closed.Swap(true) {
		return ErrClosed
	}
	uerr := d.mp.unmap()
	d.rmu.Lock()
	if d.rdirect != nil {
		d.rdirect.f.Close()
	}
	d.rmu.Unlock()
	if err := d.f.Close(); err != nil {
		return fmt.Errorf("blockdev: close: %w", err)
	}
	if uerr != nil {
		return fmt.Errorf("blockdev: close: munmap: %w", uerr)
	}
	return nil
}

// Discard implements [Discarder]: it punches a hole in an image, and on a
// block device deallocates the range with fallocate(PUNCH_HOLE), which the
// kernel turns into a write-zeroes command that may unmap, falling back to
// BLKZEROOUT. Either way the range reads as zeros afterwards (BLKDISCARD
// does not promise that, so it is not used).
func (d *File) Discard(off, n int64) error {
	if d.closed.Load() {
		return ErrClosed
	}
	if d.readOnly {
		return ErrReadOnly
	}
	if err := CheckRange("discard", off, n, d.size); err != nil {
		return err
	}
	if err := CheckAligned("discard", off, n, d.lbs); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	var err error
	err = punchHole(d.f, off, n)
	if d.blockDev && errors.Is(err, errors.ErrUnsupported) {
		err = blkZeroOut(d.f, off, n)
	}
	if errors.Is(err, errors.ErrUnsupported) {
		return fmt.Errorf("blockdev: discard on %s: %w", d.path, err)
	}
	if err != nil {
		return ioErr("discard", off, n, err)
	}
	return nil
}

// NextData implements [DataFinder] with SEEK_DATA and SEEK_HOLE. A block
// device is data throughout.
func (d *File) NextData(off int64) (Extent, error) {
	if d.closed.Load() {
		return Extent{}, ErrClosed
	}
	if err := CheckRange("seek data", off, 0, d.size); err != nil {
		return Extent{}, err
	}
	if off == d.size {
		return Extent{}, io.EOF
	}
	if d.blockDev {
		return Extent{Off: off, Len: d.size - off}, nil
	}
	e, err := seekData(d.f, off)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		return Extent{Off: off, Len: d.size - off}, nil
	case err == io.EOF:
		return Extent{}, io.EOF
	case err != nil:
		return Extent{}, ioErr("seek data", off, 0, err)
	}
	if e.Off < off { // cannot happen with SEEK_DATA; be safe
		e.Len -= off - e.Off
		e.Off = off
	}
	if e.Off >= d.size {
		return Extent{}, io.EOF
	}
	if e.End() > d.size {
		e.Len = d.size - e.Off
	}
	return e, nil
}

// DropCache implements [CacheDropper] with posix_fadvise(DONTNEED).
func (d *File) DropCache(off, n int64) error {
	if d.closed.Load() {
		return ErrClosed
	}
	return dropCache(d.f, &d.mp, d.size, off, n)
}

// dropCache is CacheDropper.DropCache of the first size bytes of f, mapped
// by mp.
func dropCache(f *os.File, mp *fileMap, size, off, n int64) error {
	if n == 0 {
		n = size - off
	}
	if err := CheckRange("drop cache", off, n, size); err != nil {
		return err
	}
	// Pages mapped by ReadMapped cannot be dropped: unmap them first.
	mp.release(off, n)
	if err := fadviseDontNeed(f, off, n); err != nil {
		if errors.Is(err, errors.ErrUnsupported) {
			return fmt.Errorf("blockdev: drop cache: %w", err)
		}
		return ioErr("drop cache", off, n, err)
	}
	return nil
}

// ReadAtDirect implements [DirectReader]. When the device was not opened
// with direct I/O, it opens the file a second time with O_DIRECT on first
// use; it fails with an error matching errors.ErrUnsupported where the
// filesystem refuses O_DIRECT.
func (d *File) ReadAtDirect(p []byte, off int64) (int, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	if err := CheckRange("read", off, int64(len(p)), d.size); err != nil {
		return 0, err
	}
	if d.direct != nil {
		return d.direct.readAt(p, off)
	}
	dd, err := d.directReader()
	if err != nil {
		return 0, err
	}
	return dd.readAt(p, off)
}

func (d *File) directReader() (*dio, error) {
	d.rmu.Lock()
	defer d.rmu.Unlock()
	if d.rdirect != nil || d.rdirErr != nil {
		return d.rdirect, d.rdirErr
	}
	if d.closed.Load() {
		return nil, ErrClosed
	}
	fail := func(err error) (*dio, error) {
		d.rdirErr = fmt.Errorf("blockdev: %s: direct I/O refused (%v): %w", d.path, err, errors.ErrUnsupported)
		return nil, d.rdirErr
	}
	if oDirect == 0 {
		return fail(errors.ErrUnsupported)
	}
	err := directHook("open")
	var f *os.File
	if err == nil {
		f, err = os.OpenFile(d.path, os.O_RDONLY|oDirect, 0)
	}
	if errors.Is(err, syscall.EINVAL) {
		return fail(err)
	}
	if err != nil {
		return nil, fmt.Errorf("blockdev: %w", err)
	}
	st1, err1 := d.f.Stat()
	st2, err2 := f.Stat()
	if err1 != nil || err2 != nil || !os.SameFile(st1, st2) {
		f.Close()
		return nil, fmt.Errorf("blockdev: %s: no longer the file that was opened", d.path)
	}
	dd, err := d.probeDirect(f)
	if err != nil {
		f.Close()
		return fail(err)
	}
	d.rdirect = dd
	return dd, nil
}

// readAt reads p at off through the O_DIRECT descriptor, bouncing through
// aligned buffers when p or the range is not aligned. The range must lie
// inside the device, whose size is a multiple of offAlign.
func (dd *dio) readAt(p []byte, off int64) (int, error) {
	a := dd.offAlign
	if isAligned(p, dd.memAlign) && off%a == 0 && int64(len(p))%a == 0 {
		return readFull(dd.f, p, off)
	}
	bp := bouncePool.Get().(*[]byte)
	defer bouncePool.Put(bp)
	buf := *bp
	end := off + int64(len(p))
	alignedEnd := (end + a - 1) / a * a
	done := 0
	for done < len(p) {
		pos := off + int64(done)
		start := pos - pos%a
		stop := min(start+int64(len(buf)), alignedEnd)
		if _, err := readFull(dd.f, buf[:stop-start], start); err != nil {
			return done, err
		}
		done += copy(p[done:], buf[pos-start:stop-start])
	}
	return done, nil
}

// writeAt writes p at off, both aligned to offAlign, through the O_DIRECT
// descriptor, bouncing through aligned buffers when p is not aligned.
func (dd *dio) writeAt(p []byte, off int64) (int, error) {
	if isAligned(p, dd.memAlign) {
		return writeFull(dd.f, p, off)
	}
	bp := bouncePool.Get().(*[]byte)
	defer bouncePool.Put(bp)
	buf := *bp
	done := 0
	for done < len(p) {
		n := copy(buf, p[done:])
		if _, err := writeFull(dd.f, buf[:n], off+int64(done)); err != nil {
			return done, err
		}
		done += n
	}
	return done, nil
}

// readFull reads exactly len(p) bytes at off or returns an *IOError (an
// *IOError of r's own as it is).
func readFull(r io.ReaderAt, p []byte, off int64) (int, error) {
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return n, nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if _, ok := errors.AsType[*IOError](err); ok {
		return n, err
	}
	return n, ioErr("read", off, int64(len(p)), err)
}

// writeFull writes all of p at off or returns an *IOError.
func writeFull(f *os.File, p []byte, off int64) (int, error) {
	n, err := f.WriteAt(p, off)
	if n == len(p) && err == nil {
		return n, nil
	}
	if err == nil || errors.Is(err, io.ErrShortWrite) {
		err = io.ErrUnexpectedEOF
	}
	return n, ioErr("write", off, int64(len(p)), err)
}

// ioErr wraps an operating-system error, stripping os.PathError so that
// Err is the errno; a use-after-close becomes ErrClosed.
func ioErr(op string, off, n int64, err error) error {
	if errors.Is(err, os.ErrClosed) {
		return ErrClosed
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var se *os.SyscallError
	if errors.As(err, &se) {
		err = se.Err
	}
	return &IOError{Op: op, Off: off, Len: n, Err: err}
}

// CreateImage creates a sparse image file of size bytes at path, which must
// not exist, and opens it with opts. size must be a multiple of the block
// size. The file is created with mode 0644 less the umask: never group-
// or world-writable.
func CreateImage(path string, size int64, opts FileOptions) (*File, error) {
	bs := opts.BlockSize
	if bs == 0 {
		bs = 512
	}
	if !validBlockSize(bs) {
		return nil, fmt.Errorf("blockdev: block size %d is not a power of two from 512 to 65536", bs)
	}
	if size < 0 || size%int64(bs) != 0 {
		return nil, fmt.Errorf("blockdev: image size %d is not a non-negative multiple of the %d-byte block size", size, bs)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("blockdev: %w", err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("blockdev: create image: %w", err)
	}
	d, err := OpenFile(path, opts)
	if err != nil {
		os.Remove(path)
		return nil, err
	}
	return d, nil
}
