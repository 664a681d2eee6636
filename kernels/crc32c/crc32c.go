// Package crc32c implements CRC-32C (Castagnoli), the 32-bit guard of NVMe
// protection information and the sector checksum of the difctl store.
//
// Parameters (Rocksoft/Williams model): width 32, polynomial 0x1EDC6F41,
// init 0xFFFFFFFF, reflected, xorout 0xFFFFFFFF; the check value, the CRC of
// "123456789", is 0xE3069283. It equals hash/crc32 with the Castagnoli
// table, which is the portable implementation here. On media the guard is
// stored big-endian.
//
// Where the CPU allows, the package runs carry-less-multiply folding
// (VPCLMULQDQ on amd64, PMULL on arm64) beside the CRC32 instructions.
// Blocks computes one guard per block over many blocks in one pass.
package crc32c

//go:generate go run -C ../_asm ./crcgen -crc crc32c -dir ../crc32c
//go:generate go run -C ../_asm ./fold -crc crc32c -dir ../crc32c
