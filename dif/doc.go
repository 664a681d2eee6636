// Package dif generates and verifies T10 DIF / NVMe protection information
// (PI) over runs of blocks. It is pure Go and does no I/O; guards come from
// the batch kernels in kernels/crct10dif, kernels/crc32c and
// kernels/crc64nvme (one kernel call per chunk of blocks, whichever
// implementation is active), and the scans of tuples packed one after the
// other (the separate layout at 512+8, 4096+8, 512+16:crc64, ...) from
// kernels/piscan.
//
// # Formats
//
// A Format (NewFormat, Parse) fixes the block size (512 to 65536 bytes,
// power of two), the metadata size per block (at least the tuple), the
// guard, the PI type, where the tuple sits in the metadata, the storage tag
// width and the layout. All fields are big-endian:
//
//	guard  CRC             tuple  bytes: guard  app   storage+ref space            STS
//	crc16  CRC-16/T10-DIF   8 B          0-1    2-3   4-7:   32 bits               0..32
//	crc32  CRC-32C         16 B          0-3    4-5   6-15:  80 bits               0..80
//	crc64  CRC-64/NVME     16 B          0-7    8-9   10-15: 48 bits               0..48
//
// The storage tag takes the upper STS bits of the space, the ref tag the
// remaining low bits (32-STS, 80-STS, 48-STS). With PI last (the default)
// the tuple is the last bytes of the metadata and the guard covers the data
// plus the metadata bytes before it; with PI first the guard covers the
// data only.
//
// The text form, for the CLI and manifests, is documented at Parse:
// "512+8", "4096+16:crc64", "4096+64:crc32:type3:pi-first:sts=16:dix".
//
// # Types and escapes
//
// Type 1 and Type 2: block i of a run carries the ref tag
// (Params.RefTag + i) truncated to the ref tag width, and Verify checks it.
// Type 3: every block carries Params.RefTag, not checked. Type 0: no PI.
// The app tag check is (stored & AppMask) == (AppTag & AppMask); Params.Skip
// switches checks off.
//
// Types 1 and 2 skip every check of a block whose app tag is 0xFFFF
// (StateEscaped). Type 3 skips a block whose app tag is 0xFFFF and whose
// whole storage+ref space is all ones. A block whose app, storage and ref
// tags are all ones, at any type, is unwritten or discarded
// (StateUnwritten): not a failure.
//
// # Runs and layouts
//
// Operations take a run of blocks as two buffers (data, md). Interleaved:
// data holds extended blocks of ExtendedBlockSize bytes (520, 4104, 4160,
// ...) and md is empty. Separate (DIX): data holds the data blocks and md
// MetadataSize bytes per block. Generate, Verify, VerifyFunc, Classify,
// Insert, Strip, Remap, Inject, ReadTuple and WriteTuple follow the
// format's layout; ToSeparate and ToInterleaved convert between the two.
// UnwrittenTuple is the tuple to store for a discarded block.
//
// # Classifying
//
// Classify is the one call that verifies a run for a caller that acts on
// each block: it fills a Classification with every block's State and, on
// request, each block's sector checksum (Sums: the CRC-32C of its data,
// SectorSum) and a copy of the run (Src: the blocks are read from a buffer
// the caller does not own and copied to data in the checking pass, so that
// what is verified is what is handed on). A caller may pass a fused kernel
// (Copy, a CopyFunc) that replaces the copying loop of the separate layout
// with the 16-bit guard and computes something of its own of each block in
// the same pass; Classification.Single reports whether that single pass
// covered every block.
//
// # Errors
//
// Verify reports every failing block: a *VerifyError lists the first
// MaxListed *CheckError values and counts all; VerifyFunc calls a visitor
// for each. Every integrity failure matches ErrIntegrity and its field's
// sentinel (ErrGuard, ErrAppTag, ErrRefTag, ErrStorageTag). Bad formats give
// a *FormatError, bad buffers errors wrapping ErrBuffer, bad parameters
// errors wrapping ErrParams; no input makes the package panic.
//
// Generate and Verify do not allocate on clean runs; Classify does not
// allocate.
package dif
