package ceiling

import (
	"testing"
	"time"
)

// hasYMMClmul reports AVX2 and VPCLMULQDQ (CPUID leaf 7: EBX bit 5, ECX bit
// 10) and PCLMULQDQ (leaf 1, ECX bit 1). The OS support of the YMM state is
// assumed: the benchmarks are a measurement tool, not a feature check.
func hasYMMClmul() (pclmul, ymm bool) {
	_, _, ecx1, _ := cpuid(1, 0)
	_, ebx7, ecx7, _ := cpuid(7, 0)
	pclmul = ecx1&(1<<1) != 0
	return pclmul, pclmul && ebx7&(1<<5) != 0 && ecx7&(1<<10) != 0
}

// bench times kernel (ops instructions per loop iteration) against
// addChain (8 cycles per iteration) and reports cycles per instruction, from
// the fastest of the b.N timings of each (a shared machine interrupts some).
func bench(b *testing.B, ops int, kernel func(int)) { benchUnit(b, ops, "insn", kernel) }

// benchUnit is bench reporting cycles per unit, ops units per iteration.
func benchUnit(b *testing.B, ops int, unit string, kernel func(int)) {
	const n = 10000
	tk, ta := time.Duration(1<<62), time.Duration(1<<62)
	for b.Loop() {
		t0 := time.Now()
		addChain(n)
		t1 := time.Now()
		kernel(n)
		ta = min(ta, t1.Sub(t0))
		tk = min(tk, time.Since(t1))
	}
	b.ReportMetric(8*float64(tk)/float64(ta)/float64(ops), "cycles/"+unit)
	// The add chain retires one add per cycle, so it also clocks the core.
	b.ReportMetric(8*n/ta.Seconds()/1e9, "GHz")
}

var buf [128]byte

func BenchmarkCeiling(b *testing.B) {
	pclmul, ymm := hasYMMClmul()
	for _, c := range []struct {
		name string
		ymm  bool
		ops  int
		f    func(int)
	}{
		{"insn=pclmulqdq-xmm/measure=throughput", false, 16, clmulX},
		{"insn=vpclmulqdq-ymm/measure=throughput", true, 16, clmulY},
		{"insn=vpclmulqdq-ymm/measure=latency", true, 8, clmulYLat},
		// 8 multiplies and 4 VPERMQ from memory: 2 cycles per
		// instruction if they share a port, 2*8/12 if not.
		{"insn=vpclmulqdq-ymm+vpermq-mem/measure=throughput", true, 12, func(n int) { clmulYPerm(&buf[0], n) }},
		// 8 multiplies, 4 loads and 4 VPSHUFB: 2 cycles per multiply
		// if the shuffles have a port of their own, 3 if they share it.
		{"insn=vpclmulqdq-ymm+vpshufb/measure=throughput", true, 8, func(n int) { clmulYShuf(&buf[0], n) }},
		{"insn=crc32q/measure=throughput", false, 8, crc32Q},
		// 8 multiplies and 8 CRC32Q: 2 cycles per multiply if CRC32
		// has a unit of its own, 3 if it shares the multiplier's.
		{"insn=vpclmulqdq-ymm+crc32q/measure=throughput", true, 8, clmulYCRC},
		// The same on XMM with VEX encodings (AVX and PCLMULQDQ, as on
		// Zen 2): the mix of the fused XMM kernel.
		{"insn=vpclmulqdq-xmm+crc32q/measure=throughput", false, 8, clmulXCRC},
	} {
		b.Run(c.name, func(b *testing.B) {
			if !pclmul || c.ymm && !ymm {
				b.Skip("the CPU lacks the instruction")
			}
			// VEX encodings on XMM need AVX (CPUID leaf 1, ECX bit 28).
			if _, _, ecx1, _ := cpuid(1, 0); c.name == "insn=vpclmulqdq-xmm+crc32q/measure=throughput" && ecx1&(1<<28) == 0 {
				b.Skip("the CPU lacks AVX")
			}
			bench(b, c.ops, c.f)
		})
	}
	// The step of the fused kernel, 128 bytes of four blocks, in halves and
	// whole, in cycles per step: the multiplier alone would allow 16 (8
	// VPCLMULQDQ at 2 cycles), and so would the CRC32Q alone (16 at 1).
	for _, c := range []struct {
		name string
		f    func(*byte, int)
	}{
		{"step=fused/half=clmul", stepClmul},
		{"step=fused/half=crc32q", stepCRC},
		{"step=fused/half=both", stepFused},
	} {
		b.Run(c.name, func(b *testing.B) {
			if !ymm {
				b.Skip("the CPU lacks VPCLMULQDQ")
			}
			benchUnit(b, 1, "step", func(n int) { c.f(&buf[0], n) })
		})
	}
}
