//go:build isal

package compare

// The ISA-L functions, called through cgo. Every wrapper crosses into C
// once and loops there, so the cost of a cgo call (tens of nanoseconds) is
// not charged to ISA-L: repeat runs n chained calls over the same buffer,
// blocks calls ISA-L once per block.

/*
#cgo LDFLAGS: -lisal
#include <stddef.h>
#include <stdint.h>
#include <isa-l.h>

static uint16_t rep16(uint16_t crc, const unsigned char *p, uint64_t len, long n) {
	for (long i = 0; i < n; i++) crc = crc16_t10dif(crc, p, len);
	return crc;
}
static void blocks16(uint16_t *dst, const unsigned char *p, uint64_t blockLen, uint64_t stride, long n) {
	for (long i = 0; i < n; i++) dst[i] = crc16_t10dif(0, p + i * stride, blockLen);
}

// crc32_iscsi takes and returns the CRC register: a CRC-32C is
// ~crc32_iscsi(p, len, ~previous CRC-32C).
static uint32_t rep32(uint32_t crc, unsigned char *p, int len, long n) {
	for (long i = 0; i < n; i++) crc = ~crc32_iscsi(p, len, ~crc);
	return crc;
}
static void blocks32(uint32_t *dst, unsigned char *p, int blockLen, uint64_t stride, long n) {
	for (long i = 0; i < n; i++) dst[i] = ~crc32_iscsi(p + i * stride, blockLen, 0xffffffffu);
}

static uint64_t rep64(uint64_t crc, const unsigned char *p, uint64_t len, long n) {
	for (long i = 0; i < n; i++) crc = crc64_ecma_refl(crc, p, len);
	return crc;
}
static void blocks64(uint64_t *dst, const unsigned char *p, uint64_t blockLen, uint64_t stride, long n) {
	for (long i = 0; i < n; i++) dst[i] = crc64_ecma_refl(0, p + i * stride, blockLen);
}
*/
import "C"

import "unsafe"

func ptr(p []byte) *C.uchar { return (*C.uchar)(unsafe.Pointer(unsafe.SliceData(p))) }

// isalT10DIF is crc16_t10dif(crc, p): CRC-16/T10-DIF continued from crc.
func isalT10DIF(crc uint16, p []byte, n int) uint16 {
	return uint16(C.rep16(C.uint16_t(crc), ptr(p), C.uint64_t(len(p)), C.long(n)))
}

func isalT10DIFBlocks(dst []uint16, p []byte, blockLen, stride int) {
	C.blocks16((*C.uint16_t)(unsafe.Pointer(unsafe.SliceData(dst))), ptr(p), C.uint64_t(blockLen), C.uint64_t(stride), C.long(len(dst)))
}

// isalISCSI is CRC-32C continued from crc (the finalised value, as
// crc32c.Update takes it), through crc32_iscsi.
func isalISCSI(crc uint32, p []byte, n int) uint32 {
	return uint32(C.rep32(C.uint32_t(crc), ptr(p), C.int(len(p)), C.long(n)))
}

func isalISCSIBlocks(dst []uint32, p []byte, blockLen, stride int) {
	C.blocks32((*C.uint32_t)(unsafe.Pointer(unsafe.SliceData(dst))), ptr(p), C.int(blockLen), C.uint64_t(stride), C.long(len(dst)))
}

// isalECMARefl is crc64_ecma_refl(crc, p): CRC-64/XZ (hash/crc64's ECMA
// table) continued from crc. It runs the same algorithm as CRC-64/NVME with
// another polynomial and stands in for it: ISA-L 2.30 has no CRC-64/NVME.
func isalECMARefl(crc uint64, p []byte, n int) uint64 {
	return uint64(C.rep64(C.uint64_t(crc), ptr(p), C.uint64_t(len(p)), C.long(n)))
}

func isalECMAReflBlocks(dst []uint64, p []byte, blockLen, stride int) {
	C.blocks64((*C.uint64_t)(unsafe.Pointer(unsafe.SliceData(dst))), ptr(p), C.uint64_t(blockLen), C.uint64_t(stride), C.long(len(dst)))
}
