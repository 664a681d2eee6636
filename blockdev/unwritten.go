package blockdev

import "fmt"

// Unwritten blocks.
//
// A block is unwritten when the store records it so: Create adopted it as a
// hole of a sparse image, or it was discarded. Its tuple is the PI escape
// (all-ones tags) and it has no sector checksum, so PI alone would accept
// any data in it. The rule is therefore:
//
//	An unwritten block must read back from the device as zeros, or lie in
//	a hole (SEEK_DATA), which reads as zeros.
//
// Anything else is a finding of its own kind, [KindUnwrittenData] ("data
// in an unwritten block"): ReadAt fails with an *IntegrityError whose
// problem wraps *[UnwrittenDataError] (never returning the block as
// zeros), and CheckRun, and so verify and scrub, report it. Crash recovery
// holds an intent over an unwritten block to the same rule: its data must
// match the intent's new tuple or be zeros, or the block is torn.
//
// Cost. Unwritten blocks are zero-checked with bytes.Equal against a zero
// buffer (the runtime's vectorised memequal, tens of GB/s), in the same
// pass that verifies the written blocks. A run whose blocks are all
// unwritten and that the device reports as a hole (a [device.DataFinder]) is not
// read at all.

// ErrUnwrittenData matches every *UnwrittenDataError; it also matches
// dif.ErrIntegrity.
var ErrUnwrittenData error = &integritySentinel{"blockdev: data in an unwritten block"}

// UnwrittenDataError reports an unwritten (never written, or discarded)
// block whose data on the device is not zeros. It matches ErrUnwrittenData
// and dif.ErrIntegrity.
type UnwrittenDataError struct {
	LBA    int64
	Offset int // of the first non-zero byte in the block
}

func (e *UnwrittenDataError) Error() string {
	return fmt.Sprintf("blockdev: block %d: data in an unwritten block (first non-zero byte at offset %d); an unwritten block must read as zeros", e.LBA, e.Offset)
}

func (e *UnwrittenDataError) Unwrap() error { return ErrUnwrittenData }
