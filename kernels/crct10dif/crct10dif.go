// Package crct10dif implements CRC-16/T10-DIF, the 16-bit guard of T10
// protection information.
//
// Parameters (Rocksoft/Williams model): width 16, polynomial 0x8BB7, init 0,
// not reflected, xorout 0; the check value, the CRC of "123456789", is
// 0xD0DB. On media the guard is stored big-endian.
//
// The package computes it with carry-less-multiply folding where the CPU has
// it (PCLMULQDQ with SSE or VEX encodings and VPCLMULQDQ on amd64, PMULL on arm64, and on arm64 cores
// without the Crypto Extensions a NEON 8x8 PMULL version) and with
// slicing-by-16 tables elsewhere. Blocks computes one guard per block over
// many blocks in one pass, which is what protection information needs.
package crct10dif

//go:generate go run -C ../_asm ./crcgen -crc t10dif -dir ../crct10dif
//go:generate go run -C ../_asm ./fold -crc t10dif -dir ../crct10dif
