// Package pisource verifies images that carry their own protection
// information, with no store: extended-LBA dumps ([ExtendedImage], data and
// metadata interleaved in sectors of 520, 4104 or 4112 bytes) and DIX pairs
// ([DIXPair], a data image and a separate metadata file). The images only do
// I/O and size checks (*[SizeError]); [NewExtendedSource] and
// [NewDIXSource] make a [Source] that verifies them with package dif.
//
// A Source is a [blockdev.CheckSource], like a store-backed
// [blockdev.Volume]: what `difctl verify` and the scrub engine (package
// blockdev/scrub) consume, with the failing blocks reported as
// [blockdev.Problem]s and counted in [blockdev.RunStats]. It is also a
// [blockdev.ImportSource], from which [blockdev.ImportImage] makes a
// volume. The vocabulary of a check stays in blockdev, where a Volume's
// users find it; this package is above blockdev and shares with the Volume
// its block classifier, re-read loop and fatal-error predicate (package
// blockdev/internal/check), so an image's block fails, is re-read and ends
// a run exactly as a volume's does.
//
// The images are read through [device.Reader]: an image file is checked in
// place in a read-only mapping of the page cache where it can be, and its
// re-reads drop the page cache first. Messages keep the "blockdev: " prefix
// of the package these types come from.
package pisource
