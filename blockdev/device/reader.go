package device

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// A Reader reads a regular file, a block device or another [io.ReaderAt] of
// a known size that is not a [Device] because its size need not be a whole
// number of blocks: the images of package blockdev/pisource (extended-LBA
// dumps of 520-byte sectors, metadata files). It only reads.
//
// ReadAt has a Device's contract: all of p, or an error (matching
// [ErrOutOfRange] beyond Size, an *[IOError] for a short or failed
// transfer). A Reader of an *os.File is a [Mapper], through a read-only
// shared mapping of the file made at the first use and bounded as a
// [File]'s, and a [CacheDropper] (posix_fadvise DONTNEED, after releasing
// the range from the mapping). A Reader of another io.ReaderAt passes both
// on to it where it has them, and otherwise reports an error wrapping
// [errors.ErrUnsupported].
type Reader struct {
	r    io.ReaderAt
	f    *os.File // r, when it is a file: mapped by mp
	size int64
	own  bool // Close closes f (OpenReader)
	mp   fileMap
}

var (
	_ Mapper       = (*Reader)(nil)
	_ CacheDropper = (*Reader)(nil)
)

// errNoMapping is ReadMapped's error for a reader that cannot be mapped.
var errNoMapping = fmt.Errorf("blockdev: the reader cannot be mapped: %w", errors.ErrUnsupported)

// OpenReader opens the regular file or block device at path read-only.
// Close closes it.
func OpenReader(path string) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("blockdev: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("blockdev: %w", err)
	}
	var size int64
	switch m := st.Mode(); {
	case m.IsRegular():
		size = st.Size()
	case m&fs.ModeDevice != 0 && m&fs.ModeCharDevice == 0:
		if size, _, _, err = blockGeometry(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("blockdev: %s: %w", path, err)
		}
	default:
		f.Close()
		return nil, fmt.Errorf("blockdev: %s is neither a regular file nor a block device", path)
	}
	r := NewReader(f, size)
	r.own = true
	return r, nil
}

// NewReader reads the first size bytes of r. Close does not close r.
func NewReader(r io.ReaderAt, size int64) *Reader {
	f, _ := r.(*os.File)
	return &Reader{r: r, f: f, size: size}
}

// Size returns the size given to NewReader, or the file's at OpenReader.
func (r *Reader) Size() int64 { return r.size }

// ReadAt reads len(p) bytes at off; a short read is an *IOError.
func (r *Reader) ReadAt(p []byte, off int64) (int, error) {
	if err := CheckRange("read", off, int64(len(p)), r.size); err != nil {
		return 0, err
	}
	return readFull(r.r, p, off)
}

// ReadMapped implements [Mapper].
func (r *Reader) ReadMapped(off int64, n int, fn func([]byte) error) error {
	if r.f == nil {
		if m, ok := r.r.(Mapper); ok {
			return m.ReadMapped(off, n, fn)
		}
		return errNoMapping
	}
	if err := CheckRange("read", off, int64(n), r.size); err != nil {
		return err
	}
	return r.mp.read(r.f, r.size, r.f.Name(), nil, off, n, fn)
}

// DropCache implements [CacheDropper].
func (r *Reader) DropCache(off, n int64) error {
	if r.f == nil {
		if d, ok := r.r.(CacheDropper); ok {
			return d.DropCache(off, n)
		}
		return fmt.Errorf("blockdev: drop cache: %w", errors.ErrUnsupported)
	}
	return dropCache(r.f, &r.mp, r.size, off, n)
}

// Close releases the mapping, and closes the file opened by OpenReader.
func (r *Reader) Close() error {
	var uerr error
	if r.f != nil {
		uerr = r.mp.unmap()
	}
	if !r.own {
		return uerr
	}
	r.own = false
	return errors.Join(r.f.Close(), uerr)
}
