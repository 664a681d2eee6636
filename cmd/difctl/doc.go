// Command difctl generates, stores and verifies T10 DIF / NVMe protection
// information for block images and devices.
//
// Images without PI are protected with `difctl protect`, which keeps the
// tuples in a store beside the image (Pebble, IMAGE.difdb, by default);
// `verify`, `scrub`, `inspect`, `write`, `discard`, `convert` and `remap`
// then work through that store. Images that carry their own PI
// (extended-LBA dumps, DIX pairs) are checked with `verify --interleaved`
// or `verify --dix`. `crc`, `kernels` and `bench` expose the checksum
// kernels.
//
// Exit status is a bit mask as in fsck(8): 0 clean, 4 integrity errors
// left uncorrected, 8 operational error, 16 usage error, 32 cancelled.
// With --json every command writes JSON Lines in the difctl/v1 schema
// (cmd/difctl/SCHEMA.md). See the README for a command reference and
// `difctl COMMAND --help` for each command's flags.
package main
