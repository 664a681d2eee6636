package parity

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/check"
	"github.com/difctl/difctl/kernels/crc32c"
)

// Checksum returns the checksum of parity block j of stripe s, whose
// contents are p: the CRC-32C of a 16-byte prefix, "dpar", s (8 bytes,
// big-endian), j (4 bytes, big-endian), followed by p. A block in the
// wrong place fails its checksum by its contents; the address in the
// prefix makes it fail even when it travelled with its own checksum (a
// write of stripe s's parity and checksums to stripe s+1's place), unless
// the two stripes' blocks are equal, and then it is the right parity
// anyway.
func Checksum(s int64, j int, p []byte) uint32 {
	var pre [16]byte
	copy(pre[:4], "dpar")
	binary.BigEndian.PutUint64(pre[4:], uint64(s))
	binary.BigEndian.PutUint32(pre[12:], uint32(j))
	return crc32c.Update(crc32c.Checksum(pre[:]), p)
}

// ErrDamaged is matched by every *BlockError: a parity block that must not
// be used.
var ErrDamaged = errors.New("parity: damaged parity block")

// ErrChecksum is the cause of a *BlockError for a parity block whose
// contents do not match its recorded checksum.
var ErrChecksum = errors.New("checksum mismatch")

// BlockError reports a parity block that cannot be used: its read failed
// (Err is the device's error) or its checksum does not match (Err is
// ErrChecksum, Expected and Actual the checksums). It is an erasure of its
// stripe. It matches ErrDamaged and Err.
type BlockError struct {
	Stripe           int64
	Index            int // j, 0 to m-1
	Off              int64
	Err              error
	Expected, Actual uint32 // with ErrChecksum
}

func (e *BlockError) Error() string {
	if errors.Is(e.Err, ErrChecksum) {
		return fmt.Sprintf("parity: stripe %d parity block %d (offset %d): checksum %08x, want %08x", e.Stripe, e.Index, e.Off, e.Actual, e.Expected)
	}
	return fmt.Sprintf("parity: stripe %d parity block %d (offset %d): %v", e.Stripe, e.Index, e.Off, e.Err)
}

// Unwrap returns ErrDamaged and the cause.
func (e *BlockError) Unwrap() []error { return []error{ErrDamaged, e.Err} }

// File is the parity of a volume on a device (the parity file beside the
// image, or a device given by path), laid out by a Layout: parity block j
// of stripe s at Layout.ParityOffset(s, j). It reads and writes a stripe's
// m parity blocks in one request each. The checksums of the blocks live
// outside the file (in the store, as SumPages): Read checks each block
// against the checksum it is given and reports a block that fails, or
// cannot be read, as an erasure, never as data.
//
// It is safe for concurrent use as its device is; concurrent writes of one
// stripe race as on a disk.
type File struct {
	dev device.Device
	l   Layout
}

// NewFile returns l's parity file on dev, which must hold at least
// l.ParitySize() bytes and whose logical block size divides the layout's
// block size. The File does not own dev: closing and syncing it are the
// caller's.
func NewFile(dev device.Device, l Layout) (*File, error) {
	if l.k == 0 {
		return nil, fmt.Errorf("%w: the zero Layout", ErrInvalidLayout)
	}
	if lbs := dev.LogicalBlockSize(); lbs <= 0 || l.bs%lbs != 0 {
		return nil, fmt.Errorf("parity: the parity device's %d-byte logical blocks do not divide the %d-byte block size", lbs, l.bs)
	}
	if size := dev.Size(); size < l.ParitySize() {
		return nil, fmt.Errorf("parity: the parity device has %d bytes, the layout (%v) needs %d", size, l, l.ParitySize())
	}
	return &File{dev: dev, l: l}, nil
}

// Layout returns the file's layout.
func (f *File) Layout() Layout { return f.l }

func (f *File) stripeBuf(s int64, buf []byte) error {
	if s < 0 || s >= f.l.stripes {
		return fmt.Errorf("parity: stripe %d out of range (%d stripes)", s, f.l.stripes)
	}
	if len(buf) != f.l.m*f.l.bs {
		return fmt.Errorf("%w: a stripe's parity buffer has %d bytes, want %d", ErrShards, len(buf), f.l.m*f.l.bs)
	}
	return nil
}

// sums computes the checksums of stripe s's parity blocks in buf (m blocks
// of BlockSize bytes, block j at buf[j·bs:]) into sums (m entries).
func (f *File) sums(s int64, buf []byte, sums []uint32) {
	bs := f.l.bs
	for j := range sums[:f.l.m] {
		sums[j] = Checksum(s, j, buf[j*bs:(j+1)*bs])
	}
}

// Write writes stripe s's m parity blocks from buf (block j at buf[j·bs:])
// in one request, and fills sums (m entries) with their checksums, for the
// caller to record. It does not sync the device: a stripe's parity is not
// durable before the caller's Sync, and its checksums must not be
// committed before that.
func (f *File) Write(s int64, buf []byte, sums []uint32) error {
	if err := f.stripeBuf(s, buf); err != nil {
		return err
	}
	if len(sums) != f.l.m {
		return fmt.Errorf("%w: %d checksums, want %d", ErrShards, len(sums), f.l.m)
	}
	f.sums(s, buf, sums)
	if _, err := f.dev.WriteAt(buf, f.l.ParityOffset(s, 0)); err != nil {
		return fmt.Errorf("parity: write of stripe %d: %w", s, err)
	}
	return nil
}

// WriteStripes writes the parity of the n stripes from s on in one
// request, as Write does one's: buf holds them as the file does (stripe
// s+i's block j at buf[(i·m+j)·bs:]) and sums (n·m entries) receives their
// checksums, stripe s+i's at sums[i·m:]. It does not sync the device.
func (f *File) WriteStripes(s int64, n int, buf []byte, sums []uint32) error {
	m, bs := f.l.m, f.l.bs
	if n < 1 || s < 0 || s > f.l.stripes-int64(n) {
		return fmt.Errorf("parity: stripes [%d, %d) out of range (%d stripes)", s, s+int64(n), f.l.stripes)
	}
	if len(buf) != n*m*bs || len(sums) != n*m {
		return fmt.Errorf("%w: %d stripes' parity in %d bytes with %d checksums, want %d and %d", ErrShards, n, len(buf), len(sums), n*m*bs, n*m)
	}
	for i := range n {
		f.sums(s+int64(i), buf[i*m*bs:(i+1)*m*bs], sums[i*m:(i+1)*m])
	}
	if _, err := f.dev.WriteAt(buf, f.l.ParityOffset(s, 0)); err != nil {
		return fmt.Errorf("parity: write of stripes [%d, %d): %w", s, s+int64(n), err)
	}
	return nil
}

// Read reads stripe s's m parity blocks into buf (block j at buf[j·bs:])
// and checks block j against sums[j]. errs (m entries) is set to nil for a
// block that is good and to a *BlockError for one that is not (unreadable,
// or a checksum mismatch): that block is an erasure, and its bytes in buf
// are not parity. Read returns the number of bad blocks, and an error only
// for a failure that is not a block's (the device closed or crashed, the
// offset outside it: see blockdev/internal/check.Fatal), after which errs
// and buf mean nothing.
//
// One request reads the stripe; if it fails, each block is read on its
// own, so that one unreadable block costs only itself.
func (f *File) Read(s int64, buf []byte, sums []uint32, errs []error) (bad int, err error) {
	if err := f.stripeBuf(s, buf); err != nil {
		return 0, err
	}
	if len(sums) != f.l.m || len(errs) != f.l.m {
		return 0, fmt.Errorf("%w: %d checksums and %d errors, want %d", ErrShards, len(sums), len(errs), f.l.m)
	}
	bs := f.l.bs
	off := f.l.ParityOffset(s, 0)
	clear(errs)
	if _, err := f.dev.ReadAt(buf, off); err != nil {
		if check.Fatal(err) {
			return 0, fmt.Errorf("parity: read of stripe %d: %w", s, err)
		}
		for j := range f.l.m {
			boff := off + int64(j*bs)
			if _, err := f.dev.ReadAt(buf[j*bs:(j+1)*bs], boff); err != nil {
				if check.Fatal(err) {
					return 0, fmt.Errorf("parity: read of stripe %d: %w", s, err)
				}
				errs[j] = &BlockError{Stripe: s, Index: j, Off: boff, Err: err}
			}
		}
	}
	for j := range f.l.m {
		if errs[j] != nil {
			bad++
			continue
		}
		if got := Checksum(s, j, buf[j*bs:(j+1)*bs]); got != sums[j] {
			errs[j] = &BlockError{Stripe: s, Index: j, Off: off + int64(j*bs), Err: ErrChecksum, Expected: sums[j], Actual: got}
			bad++
		}
	}
	return bad, nil
}
