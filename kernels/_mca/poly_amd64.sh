#!/usr/bin/env bash
# poly_amd64.sh models the hot loops of the amd64 Poly1305 lane kernels and
# of their peer, x/crypto's Poly1305 (golang.org/x/crypto/internal/poly1305
# update, MULQ, one chunk per iteration), with llvm-mca on the code the Go
# toolchain emits: it builds kernels/poly1305's amd64 test binary,
# disassembles each symbol with objdump, cuts out the body of its N-th
# backward branch, and runs llvm-mca on it for every CPU in $CPUS. It prints
# cycles per iteration and per byte, and bytes per iteration count every
# block of the iteration (AVX2: 4 blocks x 4 chunks; hybrid: 6 x 4; the
# eight-chunk kernels 4 x 8 and 6 x 8; IFMA: 8 x 4; x/crypto: one chunk).
#
# znver2 and znver3 model the AMD EPYC Zen 2 (family 23) and Zen 3 (family
# 25) machines the kernels were tuned on (/proc/cpuinfo says which), where
# the figures can be set beside measurements; znver4 (Zen 4, family 25,
# measured on 3 December 2026) and sapphirerapids have AVX-512 IFMA, so
# those columns are the IFMA kernel's case on paper, as
# TestEmulatedPoly1305's instruction counts are (kernels/_asm/poly1305).
#
# On znver3 (two VPMULUDQ pipes, FP0 and FP3) the eight-chunk loops are not
# bound by the multiplier: the avx2r8 loop (512 bytes, 200 VPMULUDQ and
# about 340 other vector instructions) models at 226 cycles against a
# resource bound of 140, with the 64-entry FP scheduler full in 97% of the
# cycles (llvm-mca -scheduler-stats -dispatch-stats) and dispatch stalled
# on it: every VPMULUDQ waits for its key power, a memory operand, and
# every add for its multiply, and in-order dispatch then holds back the
# hybrid kernels' scalar lanes too (hybrid8 gains 3% per byte over avx2r8
# on znver3, 13% on znver2). A scratch model of the same step with the
# nine key vectors of each power loaded once into a register, h kept in
# memory to free the registers, came to 193 cycles (ref_poly_r8_keyreg.s);
# lanesAVX2R8Copy now has that form (vecStepKS), 165 cycles per main loop.
#
# Usage: kernels/_mca/poly_amd64.sh
# Environment: CPUS (default "znver2 znver3 znver4 sapphirerapids"), ITER
# (300), MCA (llvm-mca-19, Debian llvm-19), OBJDUMP (objdump).
set -euo pipefail

. "$(dirname "$0")/lib.sh"
mca_init "znver2 znver3 znver4 sapphirerapids"

#   package symbol                                        loop  bytes  label
table='
poly1305 golang.org/x/crypto/internal/poly1305.update.abi0   1    16   x/crypto: MULQ, 1 block x 1 chunk
poly1305 github.com/difctl/difctl/kernels/poly1305.lanesAVX2.abi0        1   256   avx2: 4 blocks x 4 chunks
poly1305 github.com/difctl/difctl/kernels/poly1305.lanesHybridAVX2.abi0  1   384   hybrid: 6 blocks x 4 chunks
poly1305 github.com/difctl/difctl/kernels/poly1305.lanesAVX2R8.abi0      1   512   avx2r8: 4 blocks x 8 chunks
poly1305 github.com/difctl/difctl/kernels/poly1305.lanesHybridR8.abi0    1   768   hybrid8: 6 blocks x 8 chunks
poly1305 github.com/difctl/difctl/kernels/poly1305.lanesIFMA.abi0        1   512   avx512ifma: 8 blocks x 4 chunks
'

mca_dis poly1305
mca_table 36 <<<"$table"
