#!/usr/bin/env bash
# small_avx2.sh models the steady-state loops of the AVX2 tier's single
# short calls with llvm-mca on the code the Go toolchain emits, in the
# manner of crc32c_avx512.sh: updateEntryY's fold loop (two YMM pairs of
# lanes a step, each folded straight into the last lane; kernels/_asm/small)
# for the three CRCs, against the three CRC32 streams (hybridShort3) that
# the avx2 implementation of CRC-32C ran below 2 KiB before updateEntryY,
# and the one CRC32 stream below 128 bytes: cycles per iteration and per
# byte.
#
# llvm-mca 19 models Zen 3 (znver3) and Alder Lake's Golden Cove
# (alderlake), the AVX2 tier's CPUs: a bound on paper beside the
# measurements of docs/perf/small-calls.md.
#
# Usage: kernels/_mca/small_avx2.sh
# Environment: CPUS (default "znver3 alderlake"), ITER (300),
# MCA (llvm-mca-19, Debian llvm-19), OBJDUMP (objdump).
set -euo pipefail

. "$(dirname "$0")/lib.sh"
mca_init "znver3 alderlake"

#   package    symbol                                                loop  bytes  label
table='
crc32c     github.com/difctl/difctl/kernels/crc32c.updateEntryY.abi0        1  64  crc32c fold, 2 YMM
crc32c     github.com/difctl/difctl/kernels/crc32c.hybridShort3.abi0        2  24  crc32c 3 CRC32 streams
crc32c     github.com/difctl/difctl/kernels/crc32c.hybridShort.abi0         1  16  crc32c 1 CRC32 stream
crct10dif  github.com/difctl/difctl/kernels/crct10dif.updateEntryY.abi0     1  64  t10dif fold, 2 YMM
crc64nvme  github.com/difctl/difctl/kernels/crc64nvme.updateEntryY.abi0     1  64  crc64nvme fold, 2 YMM
'

mca_dis crc32c crct10dif crc64nvme
mca_table 36 <<<"$table"
