package pisource

import (
	"errors"

	"github.com/difctl/difctl/dif"
)

// A BlockReader reads blocks with their metadata from something other
// than an image file: a device that stores PI itself, such as an NVMe
// namespace read through passthrough (package blockdev/nvme's *Device).
// It reads what the device stores, with no check of its own, and needs no
// page cache dropped for a re-read.
type BlockReader interface {
	// Blocks is the number of blocks; BlockSize and MetaSize the data and
	// metadata bytes of each.
	Blocks() int64
	BlockSize() int
	MetaSize() int
	// Interleaved reports the layout of ReadBlocks: each block's data
	// followed by its metadata, or the data and the metadata apart.
	Interleaved() bool
	// ReadBlocks reads blocks [lba, lba+n): interleaved, their n sectors
	// into data[:n*(BlockSize+MetaSize)] (md is not used); otherwise their
	// data into data[:n*BlockSize] and their metadata into
	// md[:n*MetaSize]. Blocks beyond the end give an error wrapping
	// device.ErrOutOfRange. It is called concurrently on disjoint runs.
	ReadBlocks(lba int64, n int, data, md []byte) error
}

// NewReaderSource returns a CheckSource over r, verified with format f and
// params p, with the checks of NewExtendedSource (f's layout is ignored:
// r's is used).
func NewReaderSource(r BlockReader, f dif.Format, p dif.Params) (*Source, error) {
	if r == nil {
		return nil, errors.New("blockdev: nil block reader")
	}
	if err := checkLayout(r.BlockSize(), r.MetaSize()); err != nil {
		return nil, err
	}
	layout := dif.Separate
	if r.Interleaved() {
		layout = dif.Interleaved
	}
	s, err := newSource(f.WithLayout(layout), p, r.BlockSize(), r.MetaSize())
	if err != nil {
		return nil, err
	}
	s.rd, s.blocks, s.inter = r, r.Blocks(), r.Interleaved()
	return s, nil
}
