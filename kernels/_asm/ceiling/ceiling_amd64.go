package ceiling

// addChain runs n iterations of 8 dependent ADDQs.
//
//go:noescape
func addChain(n int)

// clmulX runs n iterations of 16 PCLMULQDQ in 8 independent chains.
//
//go:noescape
func clmulX(n int)

// clmulY runs n iterations of 16 VPCLMULQDQ on YMM in 8 independent chains.
//
//go:noescape
func clmulY(n int)

// clmulYLat runs n iterations of 8 dependent VPCLMULQDQ on YMM.
//
//go:noescape
func clmulYLat(n int)

// clmulYPerm runs n iterations of 8 independent VPCLMULQDQ on YMM and 4
// independent VPERMQ loading p[0:128].
//
//go:noescape
func clmulYPerm(p *byte, n int)

// clmulYShuf runs n iterations of 8 independent VPCLMULQDQ on YMM, 4 loads
// of p[0:128] and a VPSHUFB of each: the mix of a non-reflected fold loop.
//
//go:noescape
func clmulYShuf(p *byte, n int)

// crc32Q runs n iterations of 8 independent CRC32Q chains.
//
//go:noescape
func crc32Q(n int)

// clmulYCRC runs n iterations of 8 independent VPCLMULQDQ on YMM and 8
// independent CRC32Q: the mix of a fused T10-DIF and CRC-32C loop.
//
//go:noescape
func clmulYCRC(n int)

// clmulXCRC is clmulYCRC on XMM registers (VEX encodings: AVX and
// PCLMULQDQ, no VPCLMULQDQ needed).
//
//go:noescape
func clmulXCRC(n int)

// stepClmul runs n iterations of the fold half of a step of the fused
// T10-DIF and CRC-32C kernel (kernels/_asm/fused): four accumulator chains,
// each folded by two VPCLMULQDQ on YMM and an XOR (8 multiplies, 128
// bytes).
//
//go:noescape
func stepClmul(p *byte, n int)

// stepCRC runs n iterations of the CRC-32C half of that step: 16 CRC32Q
// from p[0:128] in four chains.
//
//go:noescape
func stepCRC(p *byte, n int)

// stepFused runs both halves interleaved as the generated kernel does.
//
//go:noescape
func stepFused(p *byte, n int)

// cpuid executes CPUID.
//
//go:noescape
func cpuid(leaf, subleaf uint32) (eax, ebx, ecx, edx uint32)
