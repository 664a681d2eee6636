// Package parity is the foundation of a volume's Reed-Solomon parity
// (issue 41): the [Layout] of data blocks into stripes of k data and m
// parity blocks, the [Codec] that encodes, updates and rebuilds a stripe,
// the parity [File] that holds the parity blocks on a device, each checked
// against a [Checksum] kept outside it, with a header that names its
// volume's parity ([File.CheckHeader] refuses another's), and [SumPage],
// the record in which
// the store keeps those checksums (the Volume's parity is in package
// blockdev: parity_volume.go, parity_write.go, parity_repair.go).
//
// PI locates damage: a block that fails its tuple is an erasure, a shard
// whose position is known, so a stripe with m parity blocks rebuilds any m
// lost blocks, data or parity; a code that had to find the damage itself
// would correct m/2. A stripe with more than m erasures is refused
// ([ErrTooManyErasures]) and nothing is rebuilt.
//
// The package knows nothing of tuples, the store or the Volume, and no
// rebuilt block is trusted here: the caller (the repair stage of package
// blockdev) verifies every rebuilt data block against its tuple before it
// returns or writes it; see docs/parity.md.
//
// # Why github.com/klauspost/reedsolomon
//
// The Galois-field arithmetic comes from github.com/klauspost/reedsolomon,
// not from code of our own: it is the maintained Go implementation, with
// AVX2, AVX-512 and GFNI kernels on amd64 and NEON/SVE on arm64 chosen at
// run time and a pure-Go fallback everywhere else (so 32-bit builds work);
// it encodes at several GB/s per core; and it has the three operations a
// writable, block-addressed parity needs: Encode, Update (parity by delta,
// for a read-modify-write of a few blocks without reading the rest of the
// stripe) and ReconstructSome (rebuild only the shards asked for, into the
// caller's buffers). Its systematic Vandermonde-derived matrix (the
// library's default) is MDS: any k of the k+m shards determine the stripe.
// That matrix is part of the on-disk format of a parity file, and a test
// (TestEncodeGolden) pins the parity it produces, so that a library update
// that changed it would fail rather than make old parity files wrong.
//
// # Concurrency and memory
//
// A Layout is an immutable value. A Codec is safe for concurrent use; each
// call runs on the caller's goroutine (the library's own splitting across
// goroutines is turned off: a stripe of 4 KiB blocks is too small for it,
// and the Volume parallelises across stripes). A Codec's memory is bounded:
// the library caches an inverted matrix per erasure pattern, so the Codec
// starts a fresh encoder, dropping the cache, once the patterns it has
// seen would hold about 8 MiB (3912 patterns of 32+4). A File is safe for
// concurrent use as its device is.
package parity
