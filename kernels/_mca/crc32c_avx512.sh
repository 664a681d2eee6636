#!/usr/bin/env bash
# crc32c_avx512.sh models the main loops of the AVX-512 CRC-32C blocks
# kernels of kernels/crc32c (hybridBlocksZ0..3: sixteen blocks a step,
# c of them CRC32 streams, the others ZMM folds; hybridBlocksZA1, which
# folds from each block's first 64-byte boundary; foldBlocksAVX512, the
# four-block fold kernel) with llvm-mca on the code the Go toolchain emits,
# in the manner of poly_amd64.sh: cycles per loop iteration (one 64-byte
# step of every block of the group, 1024 bytes) and per byte.
#
# llvm-mca 19 models Zen 4 (znver4: VPCLMULQDQ zmm as two 256-bit halves,
# one every two cycles) and Sapphire Rapids (VPCLMULQDQ zmm on port 5,
# CRC32 on port 1); the figures are a bound on paper, beside the
# measurements of docs/perf/crc32c-avx512.md (which also finds a 512-bit
# µop on port 0 keeping port 1 from CRC32 on Emerald Rapids, which the
# model does not show). The Zen 4 rows are what crc32c's Zen 4 split
# (blocksZen4) rests on.
#
# Usage: kernels/_mca/crc32c_avx512.sh
# Environment: CPUS (default "znver4 sapphirerapids"), ITER (300),
# MCA (llvm-mca-19, Debian llvm-19), OBJDUMP (objdump).
set -euo pipefail

. "$(dirname "$0")/lib.sh"
mca_init "znver4 sapphirerapids"

#   package symbol                                        loop  bytes  label
table='
crc32c github.com/difctl/difctl/kernels/crc32c.hybridBlocksZ0.abi0    1  1024  Z0: 16 folds
crc32c github.com/difctl/difctl/kernels/crc32c.hybridBlocksZ1.abi0    1  1024  Z1: 1 CRC32 + 15 folds
crc32c github.com/difctl/difctl/kernels/crc32c.hybridBlocksZ2.abi0    1  1024  Z2: 2 CRC32 + 14 folds
crc32c github.com/difctl/difctl/kernels/crc32c.hybridBlocksZ3.abi0    1  1024  Z3: 3 CRC32 + 13 folds
crc32c github.com/difctl/difctl/kernels/crc32c.hybridBlocksZ2SU4.abi0  1  4096  Z2SU4: 2 CRC32 x 2 chains + 14 folds, 4 steps
crc32c github.com/difctl/difctl/kernels/crc32c.hybridBlocksZ3SU4.abi0  1  4096  Z3SU4: 3 CRC32 x 2 chains + 13 folds, 4 steps
crc32c github.com/difctl/difctl/kernels/crc32c.hybridBlocksZ4U4.abi0   1  4096  Z4U4: 4 CRC32 + 12 folds, 4 steps
crc32c github.com/difctl/difctl/kernels/crc32c.hybridBlocksZ5U4.abi0   1  4096  Z5U4: 5 CRC32 + 11 folds, 4 steps
crc32c github.com/difctl/difctl/kernels/crc32c.hybridBlocksZ3U4.abi0   1  4096  Z3U4: 3 CRC32 + 13 folds, 4 steps
crc32c github.com/difctl/difctl/kernels/crc32c.hybridBlocks256.abi0    1   192  ymm 3+3: 3 CRC32 + 3 folds
crc32c github.com/difctl/difctl/kernels/crc32c.hybridBlocks256S.abi0   1   192  ymm 2x2+4: 2 CRC32 x 2 chains + 4 folds
crc32c github.com/difctl/difctl/kernels/crc32c.hybridBlocksZA1.abi0   3  1024  ZA1: 1 CRC32 + 15 aligned folds
crc32c github.com/difctl/difctl/kernels/crc32c.foldBlocksAVX512.abi0  1   256  fold: 4 blocks
'

mca_dis crc32c
mca_table 36 <<<"$table"
