package pisource

import (
	"errors"
	"fmt"
	"io"
	"iter"
	"math/bits"

	"github.com/difctl/difctl/blockdev/device"
)

// A SizeError reports a file whose size does not fit its layout.
type SizeError struct {
	Name string // the file, or its role
	Size int64  // its size in bytes
	Unit int64  // when not 0, the size must be a multiple of Unit
	Want int64  // when Unit is 0, the size must be Want
}

func (e *SizeError) Error() string {
	if e.Unit != 0 {
		return fmt.Sprintf("blockdev: %s: size %d is not a multiple of %d", e.Name, e.Size, e.Unit)
	}
	return fmt.Sprintf("blockdev: %s: size %d, want %d", e.Name, e.Size, e.Want)
}

// checkLayout validates a data size and a metadata size per block.
func checkLayout(dataSize, metaSize int) error {
	if dataSize < 512 || dataSize > 1<<16 || bits.OnesCount(uint(dataSize)) != 1 {
		return fmt.Errorf("blockdev: data size %d is not a power of two from 512 to 65536", dataSize)
	}
	if metaSize <= 0 || metaSize > 1<<16 {
		return fmt.Errorf("blockdev: metadata size %d is not in 1..65536", metaSize)
	}
	return nil
}

// checkRun validates a request for n units at lba out of total.
func checkRun(what string, lba int64, n int, total int64) error {
	if lba < 0 || n < 0 || lba > total || int64(n) > total-lba {
		return fmt.Errorf("blockdev: %d %s at %d, of %d: %w", n, what, lba, total, device.ErrOutOfRange)
	}
	return nil
}

// ExtendedImage reads an extended-LBA image: a dump of a drive formatted
// with metadata, where each sector holds DataSize bytes of data followed by
// MetaSize bytes of metadata (520, 4104, 4112 or 4160-byte sectors). It only
// reads; interpreting the metadata is package dif's job.
type ExtendedImage struct {
	r        *device.Reader
	dataSize int
	metaSize int
	sectors  int64
}

// OpenExtendedImage opens the extended-LBA image at path (a file or a block
// device) read-only. Its size must be a multiple of dataSize+metaSize.
func OpenExtendedImage(path string, dataSize, metaSize int) (*ExtendedImage, error) {
	if err := checkLayout(dataSize, metaSize); err != nil {
		return nil, err
	}
	r, err := device.OpenReader(path)
	if err != nil {
		return nil, err
	}
	x, err := newExtended(r, path, dataSize, metaSize)
	if err != nil {
		r.Close()
		return nil, err
	}
	return x, nil
}

// NewExtendedImage reads an extended-LBA image of size bytes from r. Close
// does not close r.
func NewExtendedImage(r io.ReaderAt, size int64, dataSize, metaSize int) (*ExtendedImage, error) {
	if err := checkLayout(dataSize, metaSize); err != nil {
		return nil, err
	}
	return newExtended(device.NewReader(r, size), "extended image", dataSize, metaSize)
}

func newExtended(r *device.Reader, name string, dataSize, metaSize int) (*ExtendedImage, error) {
	ss, size := int64(dataSize+metaSize), r.Size()
	if size < 0 || size%ss != 0 {
		return nil, &SizeError{Name: name, Size: size, Unit: ss}
	}
	return &ExtendedImage{r: r, dataSize: dataSize, metaSize: metaSize, sectors: size / ss}, nil
}

// DataSize returns the data bytes per sector.
func (x *ExtendedImage) DataSize() int { return x.dataSize }

// MetaSize returns the metadata bytes per sector.
func (x *ExtendedImage) MetaSize() int { return x.metaSize }

// SectorSize returns DataSize+MetaSize.
func (x *ExtendedImage) SectorSize() int { return x.dataSize + x.metaSize }

// Sectors returns the number of sectors in the image.
func (x *ExtendedImage) Sectors() int64 { return x.sectors }

// ReadSectors reads the n raw extended sectors starting at lba into
// buf[:n*SectorSize()].
func (x *ExtendedImage) ReadSectors(lba int64, n int, buf []byte) error {
	if err := checkRun("sectors", lba, n, x.sectors); err != nil {
		return err
	}
	ss := x.SectorSize()
	if len(buf)/ss < n {
		return fmt.Errorf("blockdev: buffer of %d bytes cannot hold %d sectors of %d bytes", len(buf), n, ss)
	}
	_, err := x.r.ReadAt(buf[:n*ss], lba*int64(ss))
	return err
}

// A SectorRun is a run of N raw extended sectors starting at LBA; Buf holds
// them and is reused by the next iteration.
type SectorRun struct {
	LBA int64
	N   int
	Buf []byte
}

// Runs reads the count sectors starting at lba in runs as large as buf
// holds (at least one sector), yielding each run in order; it stops at the
// first error.
func (x *ExtendedImage) Runs(lba, count int64, buf []byte) iter.Seq2[SectorRun, error] {
	return func(yield func(SectorRun, error) bool) {
		ss := x.SectorSize()
		per := len(buf) / ss
		if per == 0 {
			yield(SectorRun{}, fmt.Errorf("blockdev: buffer of %d bytes cannot hold a %d-byte sector", len(buf), ss))
			return
		}
		if count < 0 || lba < 0 || lba > x.sectors || count > x.sectors-lba {
			yield(SectorRun{}, fmt.Errorf("blockdev: %d sectors at %d, of %d: %w", count, lba, x.sectors, device.ErrOutOfRange))
			return
		}
		for end := lba + count; lba < end; {
			n := int(min(int64(per), end-lba))
			if err := x.ReadSectors(lba, n, buf); err != nil {
				yield(SectorRun{}, err)
				return
			}
			if !yield(SectorRun{LBA: lba, N: n, Buf: buf[:n*ss]}, nil) {
				return
			}
			lba += int64(n)
		}
	}
}

// Close closes the file opened by OpenExtendedImage, and releases the
// image's mapping.
func (x *ExtendedImage) Close() error { return x.r.Close() }

// DIXPair reads a data image together with a separate metadata file that
// holds MetaSize bytes for each block of BlockSize bytes, in block order
// (the DIX layout). It only reads; interpreting the metadata is package
// dif's job.
type DIXPair struct {
	data, meta          *device.Reader
	blockSize, metaSize int
	blocks              int64
}

// OpenDIXPair opens a data image (file or block device) and its metadata
// file read-only. The data size must be a multiple of blockSize and the
// metadata size must be blocks*metaSize; otherwise it returns a *SizeError.
func OpenDIXPair(dataPath, metaPath string, blockSize, metaSize int) (*DIXPair, error) {
	if err := checkLayout(blockSize, metaSize); err != nil {
		return nil, err
	}
	dr, err := device.OpenReader(dataPath)
	if err != nil {
		return nil, err
	}
	mr, err := device.OpenReader(metaPath)
	if err != nil {
		dr.Close()
		return nil, err
	}
	p, err := newDIX(dr, dataPath, mr, metaPath, blockSize, metaSize)
	if err != nil {
		dr.Close()
		mr.Close()
		return nil, err
	}
	return p, nil
}

// NewDIXPair reads dataLen bytes of data from data and metaLen bytes of
// metadata from meta, with the checks of OpenDIXPair. Close closes neither.
func NewDIXPair(data io.ReaderAt, dataLen int64, meta io.ReaderAt, metaLen int64, blockSize, metaSize int) (*DIXPair, error) {
	if err := checkLayout(blockSize, metaSize); err != nil {
		return nil, err
	}
	return newDIX(device.NewReader(data, dataLen), "data image", device.NewReader(meta, metaLen), "metadata", blockSize, metaSize)
}

func newDIX(data *device.Reader, dname string, meta *device.Reader, mname string, bs, ms int) (*DIXPair, error) {
	dlen, mlen := data.Size(), meta.Size()
	if dlen < 0 || dlen%int64(bs) != 0 {
		return nil, &SizeError{Name: dname, Size: dlen, Unit: int64(bs)}
	}
	blocks := dlen / int64(bs)
	if mlen != blocks*int64(ms) {
		return nil, &SizeError{Name: mname, Size: mlen, Want: blocks * int64(ms)}
	}
	return &DIXPair{data: data, meta: meta, blockSize: bs, metaSize: ms, blocks: blocks}, nil
}

// BlockSize returns the data bytes per block.
func (p *DIXPair) BlockSize() int { return p.blockSize }

// MetaSize returns the metadata bytes per block.
func (p *DIXPair) MetaSize() int { return p.metaSize }

// Blocks returns the number of blocks.
func (p *DIXPair) Blocks() int64 { return p.blocks }

// ReadBlocks reads the n blocks starting at lba: their data into
// data[:n*BlockSize()] and their metadata into meta[:n*MetaSize()].
func (p *DIXPair) ReadBlocks(lba int64, n int, data, meta []byte) error {
	if err := checkRun("blocks", lba, n, p.blocks); err != nil {
		return err
	}
	if len(data)/p.blockSize < n || len(meta)/p.metaSize < n {
		return fmt.Errorf("blockdev: buffers of %d and %d bytes cannot hold %d blocks of %d+%d bytes", len(data), len(meta), n, p.blockSize, p.metaSize)
	}
	if _, err := p.data.ReadAt(data[:n*p.blockSize], lba*int64(p.blockSize)); err != nil {
		return err
	}
	_, err := p.meta.ReadAt(meta[:n*p.metaSize], lba*int64(p.metaSize))
	return err
}

// A DIXRun is a run of N blocks starting at LBA, with their data and
// metadata; both slices are reused by the next iteration.
type DIXRun struct {
	LBA        int64
	N          int
	Data, Meta []byte
}

// Runs reads the count blocks starting at lba in runs as large as both
// buffers hold (at least one block), yielding each run in order; it stops
// at the first error.
func (p *DIXPair) Runs(lba, count int64, data, meta []byte) iter.Seq2[DIXRun, error] {
	return func(yield func(DIXRun, error) bool) {
		per := min(len(data)/p.blockSize, len(meta)/p.metaSize)
		if per == 0 {
			yield(DIXRun{}, fmt.Errorf("blockdev: buffers of %d and %d bytes cannot hold a block of %d+%d bytes", len(data), len(meta), p.blockSize, p.metaSize))
			return
		}
		if count < 0 || lba < 0 || lba > p.blocks || count > p.blocks-lba {
			yield(DIXRun{}, fmt.Errorf("blockdev: %d blocks at %d, of %d: %w", count, lba, p.blocks, device.ErrOutOfRange))
			return
		}
		for end := lba + count; lba < end; {
			n := int(min(int64(per), end-lba))
			if err := p.ReadBlocks(lba, n, data, meta); err != nil {
				yield(DIXRun{}, err)
				return
			}
			if !yield(DIXRun{LBA: lba, N: n, Data: data[:n*p.blockSize], Meta: meta[:n*p.metaSize]}, nil) {
				return
			}
			lba += int64(n)
		}
	}
}

// Close closes the files opened by OpenDIXPair, and releases their
// mappings.
func (p *DIXPair) Close() error { return errors.Join(p.data.Close(), p.meta.Close()) }
