// Package crc64nvme implements CRC-64/NVME, the 64-bit guard of NVMe
// protection information.
//
// Parameters (Rocksoft/Williams model): width 64, polynomial
// 0xAD93D23594C93659, init all ones, reflected, xorout all ones; the check
// value, the CRC of "123456789", is 0xAE8B14860A799888. It equals hash/crc64
// with the table of the reflected polynomial 0x9A6C9329AC4BC9B5. On media the
// guard is stored big-endian.
//
// Where the CPU allows, the package runs carry-less-multiply folding
// (PCLMULQDQ with SSE or VEX encodings and VPCLMULQDQ on amd64, PMULL on
// arm64), and slicing-by-8 tables elsewhere. Blocks computes one guard per
// block over many blocks in one pass.
package crc64nvme

//go:generate go run -C ../_asm ./crcgen -crc crc64nvme -dir ../crc64nvme
//go:generate go run -C ../_asm ./fold -crc crc64nvme -dir ../crc64nvme
