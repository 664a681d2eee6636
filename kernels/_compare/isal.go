//go:build isal

package compare

// ISA-L 2.32.1, linked statically from ../shared/anchors/isa-l-2.32.1 (the
// shared/ folder beside the repository, as CI lays it out; see README.md).
// The kernels of the tier ISA-L's dispatcher picks on an AVX-512 CPU (the
// *_by16_10 ones) and its AVX2 kernels are called by name: the dispatcher
// picks the AVX2 kernels only on CPUs that also have GFNI and VAES, and
// chooses the 128-bit SSE kernels elsewhere (Zen 3), where the AVX2 kernels
// are the fairer peer. The dispatching entry points are kept beside them as
// impl=isal, the others are impl=isal-avx2 and impl=isal-by16_10.
//
// Every wrapper crosses into C once and loops there, and the loops that the
// ratio benchmarks time (BenchmarkAnchor) read the clock in C, so no cgo
// crossing is charged to ISA-L.

/*
#cgo CFLAGS: -I${SRCDIR}/../../../shared/anchors/isa-l-2.32.1/include -O2
#cgo LDFLAGS: ${SRCDIR}/../../../shared/anchors/isa-l-2.32.1/lib/libisal.a
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <crc.h>
#include <crc64.h>

// The AVX2 kernels are not declared in the release's headers. These are the
// prototypes of the anchor's README.
uint16_t crc16_t10dif_avx2(uint16_t init, const unsigned char *buf, uint64_t len);
unsigned int crc32_iscsi_avx2(unsigned char *buf, int len, unsigned int init);
uint64_t crc64_rocksoft_refl_avx2(uint64_t init, const unsigned char *buf, uint64_t len);
// The AVX-512 tier (VPCLMULQDQ on ZMM registers): the same conventions.
uint16_t crc16_t10dif_by16_10(uint16_t init, const unsigned char *buf, uint64_t len);
unsigned int crc32_iscsi_by16_10(unsigned char *buf, int len, unsigned int init);
uint64_t crc64_rocksoft_refl_by16_10(uint64_t init, const unsigned char *buf, uint64_t len);

// The kernels, indexed: kind 0 is the dispatcher, 1 the AVX2 kernel, 2 the
// AVX-512 (by16_10) kernel. All
// take and return the standard CRC value (CRC-32C: crc32_iscsi keeps the
// register uninverted, so a CRC-32C continued from c is ~f(p, n, ~c)).
static inline uint16_t k16(int kind, uint16_t c, const unsigned char *p, uint64_t n) {
	switch (kind) {
	case 2: return crc16_t10dif_by16_10(c, p, n);
	case 1: return crc16_t10dif_avx2(c, p, n);
	default: return crc16_t10dif(c, p, n);
	}
}
static inline uint32_t k32(int kind, uint32_t c, unsigned char *p, uint64_t n) {
	switch (kind) {
	case 2: return ~crc32_iscsi_by16_10(p, (int)n, ~c);
	case 1: return ~crc32_iscsi_avx2(p, (int)n, ~c);
	default: return ~crc32_iscsi(p, (int)n, ~c);
	}
}
static inline uint64_t k64(int kind, uint64_t c, const unsigned char *p, uint64_t n) {
	switch (kind) {
	case 2: return crc64_rocksoft_refl_by16_10(c, p, n);
	case 1: return crc64_rocksoft_refl_avx2(c, p, n);
	default: return crc64_rocksoft_refl(c, p, n);
	}
}

// clockID is the clock of the timed loops: CLOCK_THREAD_CPUTIME_ID (the
// default, -anchor.clock=cpu) or CLOCK_MONOTONIC (wall).
static clockid_t clockID = CLOCK_THREAD_CPUTIME_ID;

static void setClock(int wall) { clockID = wall ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID; }

static int64_t now(void) {
	struct timespec ts;
	clock_gettime(clockID, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// rep* run n chained updates over p and return the CRC.
static uint64_t rep(int width, int kind, uint64_t crc, unsigned char *p, uint64_t len, long n) {
	for (long i = 0; i < n; i++) {
		switch (width) {
		case 16: crc = k16(kind, (uint16_t)crc, p, len); break;
		case 32: crc = k32(kind, (uint32_t)crc, p, len); break;
		default: crc = k64(kind, crc, p, len);
		}
	}
	return crc;
}

// blocks sets dst (of width/8-byte words) to the CRC of each of n blocks
// of blockLen bytes, stride bytes apart: one call per block.
static void blocks(int width, int kind, void *dst, unsigned char *p, uint64_t blockLen, uint64_t stride, long n) {
	for (long i = 0; i < n; i++) {
		unsigned char *b = p + i * stride;
		switch (width) {
		case 16: ((uint16_t *)dst)[i] = k16(kind, 0, b, blockLen); break;
		case 32: ((uint32_t *)dst)[i] = k32(kind, 0, b, blockLen); break;
		default: ((uint64_t *)dst)[i] = k64(kind, 0, b, blockLen);
		}
	}
}

// blocksCopy16 is blocks for crc16_t10dif_copy: block i is copied from p to
// q at the same offset and dst[i] is its CRC.
static void blocksCopy16(uint16_t *dst, unsigned char *q, unsigned char *p, uint64_t blockLen, uint64_t stride, long n) {
	for (long i = 0; i < n; i++) dst[i] = crc16_t10dif_copy(0, q + i * stride, p + i * stride, blockLen);
}

// The timed loops of BenchmarkAnchor: reps passes, the clock read in C.
// Each returns the nanoseconds of all passes and leaves something of the
// results in *sink so that nothing is optimised away.

// timeBlocks times reps passes of blocks over n blocks.
static int64_t timeBlocks(int width, int kind, void *dst, unsigned char *p, uint64_t blockLen, uint64_t stride, long n, long reps) {
	int64_t t = now();
	for (long r = 0; r < reps; r++) blocks(width, kind, dst, p, blockLen, stride, n);
	return now() - t;
}

// timeChecksum times reps independent checksums of p (the CRC from its
// initial value, as Checksum computes it), XORed into *sink.
static int64_t timeChecksum(int width, int kind, unsigned char *p, uint64_t len, long reps, uint64_t *sink) {
	uint64_t s = 0;
	int64_t t = now();
	for (long r = 0; r < reps; r++) {
		switch (width) {
		case 16: s ^= k16(kind, 0, p, len); break;
		case 32: s ^= k32(kind, 0, p, len); break;
		default: s ^= k64(kind, 0, p, len);
		}
	}
	t = now() - t;
	*sink ^= s;
	return t;
}

// emptyC returns c: a C function that does nothing, called through
// emptyCall as the ISA-L kernels are called (k32's switch on kind then a
// call), so that timeEmptyC times the C side's call floor.
__attribute__((noinline)) static uint32_t emptyC(uint32_t c, unsigned char *p, uint64_t n) { (void)p; (void)n; return c; }
static uint32_t (*volatile emptyCall)(uint32_t, unsigned char *, uint64_t) = emptyC;

// timeEmptyC times reps calls of emptyC in timeChecksum's loop shape.
static int64_t timeEmptyC(unsigned char *p, uint64_t len, long reps, uint64_t *sink) {
	uint32_t (*f)(uint32_t, unsigned char *, uint64_t) = emptyCall;
	uint64_t s = 0;
	int64_t t = now();
	for (long r = 0; r < reps; r++) s ^= f(0, p, len);
	t = now() - t;
	*sink ^= s;
	return t;
}

// pair sets the guard (CRC-16/T10-DIF) and the CRC-32C of each of n blocks
// with two calls per block, of kind's kernels; with q, it first copies
// the block to q (memcpy) and computes both over the copy, as a reader
// that hands q on would.
static void pair(int kind, uint16_t *dst, uint32_t *sums, unsigned char *q, unsigned char *p, uint64_t blockLen, uint64_t stride, long n) {
	for (long i = 0; i < n; i++) {
		unsigned char *b = p + i * stride;
		if (q) {
			memcpy(q + i * stride, b, blockLen);
			b = q + i * stride;
		}
		dst[i] = k16(kind, 0, b, blockLen);
		sums[i] = k32(kind, 0, b, blockLen);
	}
}

static int64_t timePair(int kind, uint16_t *dst, uint32_t *sums, unsigned char *q, unsigned char *p, uint64_t blockLen, uint64_t stride, long n, long reps) {
	int64_t t = now();
	for (long r = 0; r < reps; r++) pair(kind, dst, sums, q, p, blockLen, stride, n);
	return now() - t;
}

static int64_t timeBlocksCopy16(uint16_t *dst, unsigned char *q, unsigned char *p, uint64_t blockLen, uint64_t stride, long n, long reps) {
	int64_t t = now();
	for (long r = 0; r < reps; r++) blocksCopy16(dst, q, p, blockLen, stride, n);
	return now() - t;
}
*/
import "C"

import (
	"time"
	"unsafe"

	"golang.org/x/sys/cpu"

	"github.com/difctl/difctl/kernels/internal/kerneltest"
	"github.com/difctl/difctl/kernels/internal/x86"
)

func ptr(p []byte) *C.uchar { return (*C.uchar)(unsafe.Pointer(unsafe.SliceData(p))) }

func dstPtr[T kerneltest.Word](dst []T) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(dst)) }

func widthOf[T kerneltest.Word]() C.int { return C.int(8 * unsafe.Sizeof(T(0))) }

// An isalKind picks ISA-L's dispatching entry point or one of its kernels
// by name.
type isalKind int

const (
	kindDispatch isalKind = 0
	kindAVX2     isalKind = 1
	kindBy16_10  isalKind = 2
)

// hasISALAVX512 reports whether ISA-L's dispatcher picks its AVX-512
// kernels (*_by16_10) on this CPU: the test of mbin_dispatch_init_clmul in
// ISA-L 2.32.1's include/multibinary.asm, which asks for the OS's ZMM state
// (x/sys/cpu reports the AVX-512 features only with it), AVX512F, VL, BW,
// CD and DQ (FLAGS_CPUID7_EBX_AVX512_G1), and VBMI2, GFNI, VAES,
// VPCLMULQDQ, VNNI, BITALG and VPOPCNTDQ (FLAGS_CPUID7_ECX_AVX512_G2):
// Intel Ice Lake and later, AMD Zen 4 and later.
var hasISALAVX512 = cpu.X86.HasAVX2 && cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSE41 &&
	cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512CD && cpu.X86.HasAVX512DQ &&
	cpu.X86.HasAVX512VBMI2 && cpu.X86.HasAVX512GFNI && cpu.X86.HasAVX512VAES && cpu.X86.HasAVX512VPCLMULQDQ &&
	cpu.X86.HasAVX512VNNI && cpu.X86.HasAVX512BITALG && cpu.X86.HasAVX512VPOPCNTDQ

// hasISALAVX2 reports whether the CPU runs ISA-L's AVX2 kernels: they use
// VPCLMULQDQ on YMM registers, which AMD Zen 2 (EPYC Rome), for one, does
// not have; called there they die of SIGILL.
var hasISALAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasPCLMULQDQ && x86.HasVPCLMULQDQ

// anchorKind is the ISA-L kernel BenchmarkAnchor compares with: the
// AVX-512 tier where ISA-L's dispatcher picks it, else the AVX2 kernel
// where the CPU runs it (the dispatcher's pick on Intel CPUs with GFNI; on
// Zen 3 the dispatcher takes the slower SSE kernels), else the one ISA-L's
// dispatcher picks (its 128-bit PCLMULQDQ kernels on Zen 2).
var anchorKind = func() isalKind {
	switch {
	case hasISALAVX512:
		return kindBy16_10
	case hasISALAVX2:
		return kindAVX2
	}
	return kindDispatch
}()

// anchorTier names anchorKind's tier for the table's title.
func anchorTier() string {
	switch anchorKind {
	case kindBy16_10:
		return "AVX-512"
	case kindAVX2:
		return "AVX2"
	}
	return "SSE/PCLMULQDQ"
}

// anchorName names anchorKind's kernels for the printed table.
func anchorName() string {
	switch anchorKind {
	case kindBy16_10:
		return "ISA-L 2.32.1 AVX-512 tier, the dispatcher's pick on this CPU (crc16_t10dif_by16_10, crc32_iscsi_by16_10, crc64_rocksoft_refl_by16_10), called directly"
	case kindAVX2:
		return "ISA-L 2.32.1 AVX2 tier (crc16_t10dif_avx2, crc32_iscsi_avx2, crc64_rocksoft_refl_avx2), called directly"
	}
	return "ISA-L 2.32.1 dispatched kernels (crc16_t10dif, crc32_iscsi, crc64_rocksoft_refl): this CPU lacks VPCLMULQDQ, which the AVX2 kernels need"
}

// isalRepeat returns the ISA-L update of kind, n chained calls over p,
// continued from crc (the standard CRC value).
func isalRepeat[T kerneltest.Word](kind isalKind) func(crc T, p []byte, n int) T {
	return func(crc T, p []byte, n int) T {
		return T(C.rep(widthOf[T](), C.int(kind), C.uint64_t(crc), ptr(p), C.uint64_t(len(p)), C.long(n)))
	}
}

// isalBlocks returns ISA-L's kernel of kind called once per block.
func isalBlocks[T kerneltest.Word](kind isalKind) func(dst []T, p []byte, blockLen, stride int) {
	return func(dst []T, p []byte, blockLen, stride int) {
		C.blocks(widthOf[T](), C.int(kind), dstPtr(dst), ptr(p), C.uint64_t(blockLen), C.uint64_t(stride), C.long(len(dst)))
	}
}

// isalT10DIFCopy is crc16_t10dif_copy called once per block.
func isalT10DIFCopy(dst []uint16, q, p []byte, blockLen, stride int) {
	C.blocksCopy16((*C.uint16_t)(dstPtr(dst)), ptr(q), ptr(p), C.uint64_t(blockLen), C.uint64_t(stride), C.long(len(dst)))
}

// isalTimePair times reps passes of the guard and the CRC-32C of every
// block by ISA-L's anchorKind kernels, two calls per block; with q != nil
// each block is first copied to q (memcpy) and both run over the copy.
func isalTimePair(dst []uint16, sums []uint32, q, p []byte, blockLen, stride, reps int) time.Duration {
	var qp *C.uchar
	if q != nil {
		qp = ptr(q)
	}
	return time.Duration(C.timePair(C.int(anchorKind), (*C.uint16_t)(dstPtr(dst)), (*C.uint32_t)(dstPtr(sums)), qp, ptr(p),
		C.uint64_t(blockLen), C.uint64_t(stride), C.long(len(dst)), C.long(reps)))
}

// isalSetClock makes the C timers read the wall clock (CLOCK_MONOTONIC) or
// the thread's CPU time (CLOCK_THREAD_CPUTIME_ID), as the Go side does.
func isalSetClock(wall bool) {
	w := 0
	if wall {
		w = 1
	}
	C.setClock(C.int(w))
}

// isalTimeBlocks times reps passes of ISA-L's anchorKind kernel once per
// block.
func isalTimeBlocks[T kerneltest.Word](dst []T, p []byte, blockLen, stride, reps int) time.Duration {
	return time.Duration(C.timeBlocks(widthOf[T](), C.int(anchorKind), dstPtr(dst), ptr(p), C.uint64_t(blockLen), C.uint64_t(stride), C.long(len(dst)), C.long(reps)))
}

// isalTimeChecksum times reps checksums of p by ISA-L's anchorKind kernel;
// it returns the time and the XOR of the checksums.
func isalTimeChecksum[T kerneltest.Word](p []byte, reps int) (time.Duration, uint64) {
	var s C.uint64_t
	d := time.Duration(C.timeChecksum(widthOf[T](), C.int(anchorKind), ptr(p), C.uint64_t(len(p)), C.long(reps), &s))
	return d, uint64(s)
}

// timeEmptyC times reps calls of a C function that does nothing, in
// isalTimeChecksum's loop (BenchmarkCallFloor).
func timeEmptyC(p []byte, reps int) time.Duration {
	var s C.uint64_t
	return time.Duration(C.timeEmptyC(ptr(p), C.uint64_t(len(p)), C.long(reps), &s))
}

// isalTimeT10DIFCopy times reps passes of crc16_t10dif_copy once per block.
func isalTimeT10DIFCopy(dst []uint16, q, p []byte, blockLen, stride, reps int) time.Duration {
	return time.Duration(C.timeBlocksCopy16((*C.uint16_t)(dstPtr(dst)), ptr(q), ptr(p), C.uint64_t(blockLen), C.uint64_t(stride), C.long(len(dst)), C.long(reps)))
}
