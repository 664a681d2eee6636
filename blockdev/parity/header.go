package parity

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/kernels/crc32c"
)

// The parity file's header says whose parity the file holds. It is one
// block after the parity blocks, at byte Layout.ParitySize() (so the
// parity blocks keep their offsets), and holds (integers big-endian):
//
//	0   "DIFPAR" magic, 0, version (1)
//	8   identity (16 bytes): chosen at random when the parity was added,
//	    and kept in the store beside the parity's configuration
//	24  k (2), m (2), block size (4)
//	32  depth (8), data blocks N (8)
//	48  CRC-32C of bytes 0 to 47 (4)
//	52  zeros to the end of the block
//
// A file whose header is not the one the store expects (another volume's
// parity file, an older parity file of this volume, a file of the wrong
// layout, or no parity file at all) is refused: its blocks must never be
// used to rebuild data, nor be written over with the volume's parity.

const (
	headerMagic   = "DIFPAR\x00\x01"
	headerLen     = 52
	headerVersion = 1
)

// ErrForeign is matched by a *HeaderError: the parity file is not the one
// the volume's store describes.
var ErrForeign = errors.New("parity: not this volume's parity file")

// HeaderError reports a parity file whose header is not the expected one.
type HeaderError struct {
	Reason string
}

func (e *HeaderError) Error() string { return "parity: parity file header: " + e.Reason }

// Unwrap returns ErrForeign.
func (e *HeaderError) Unwrap() error { return ErrForeign }

// FileSize returns the size in bytes of l's parity file: the parity blocks
// and the header block.
func (l Layout) FileSize() int64 { return l.ParitySize() + int64(l.bs) }

// header returns the header of l's parity file with identity id.
func (l Layout) header(id [16]byte) []byte {
	b := device.AlignedBuffer(l.bs)
	copy(b, headerMagic)
	copy(b[8:], id[:])
	binary.BigEndian.PutUint16(b[24:], uint16(l.k))
	binary.BigEndian.PutUint16(b[26:], uint16(l.m))
	binary.BigEndian.PutUint32(b[28:], uint32(l.bs))
	binary.BigEndian.PutUint64(b[32:], uint64(l.depth))
	binary.BigEndian.PutUint64(b[40:], uint64(l.n))
	binary.BigEndian.PutUint32(b[48:], crc32c.Checksum(b[:48]))
	return b
}

// checkHeader checks that b (a block) is the header of l's parity file
// with identity id.
func (l Layout) checkHeader(b []byte, id [16]byte) error {
	bad := func(format string, a ...any) error { return &HeaderError{Reason: fmt.Sprintf(format, a...)} }
	if len(b) < headerLen {
		return bad("%d bytes", len(b))
	}
	if string(b[:8]) != headerMagic {
		return bad("no parity header (magic %q)", b[:8])
	}
	if got, want := crc32c.Checksum(b[:48]), binary.BigEndian.Uint32(b[48:]); got != want {
		return bad("CRC-32C %08x, recorded %08x", got, want)
	}
	if !bytes.Equal(b[8:24], id[:]) {
		return bad("identity %x, want %x", b[8:24], id[:])
	}
	if want := l.header(id); !bytes.Equal(b[:headerLen], want[:headerLen]) {
		return bad("%d+%d depth %d, %d-byte blocks, %d blocks; want %v",
			binary.BigEndian.Uint16(b[24:]), binary.BigEndian.Uint16(b[26:]), binary.BigEndian.Uint64(b[32:]),
			binary.BigEndian.Uint32(b[28:]), binary.BigEndian.Uint64(b[40:]), l)
	}
	return nil
}

// WriteHeader writes the header of the file with identity id. It does not
// sync the device.
func (f *File) WriteHeader(id [16]byte) error {
	if size := f.dev.Size(); size < f.l.FileSize() {
		return fmt.Errorf("parity: the parity device has %d bytes, the layout (%v) needs %d", size, f.l, f.l.FileSize())
	}
	if _, err := f.dev.WriteAt(f.l.header(id), f.l.ParitySize()); err != nil {
		return fmt.Errorf("parity: write of the header: %w", err)
	}
	return nil
}

// CheckHeader reads the file's header and checks that it is that of this
// layout with identity id: a *HeaderError (matching ErrForeign) if not, or
// the device's error.
func (f *File) CheckHeader(id [16]byte) error {
	if size := f.dev.Size(); size < f.l.FileSize() {
		return &HeaderError{Reason: fmt.Sprintf("the parity device has %d bytes, the layout (%v) needs %d", size, f.l, f.l.FileSize())}
	}
	b := device.AlignedBuffer(f.l.bs)
	if _, err := f.dev.ReadAt(b, f.l.ParitySize()); err != nil {
		return fmt.Errorf("parity: read of the header: %w", err)
	}
	return f.l.checkHeader(b, id)
}
