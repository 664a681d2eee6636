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

here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
CPUS=${CPUS:-"znver4 sapphirerapids"}
ITER=${ITER:-300}
MCA=${MCA:-llvm-mca-19}
OBJDUMP=${OBJDUMP:-objdump}

#   symbol                                        loop  bytes  label
table='
github.com/difctl/difctl/kernels/crc32c.hybridBlocksZ0.abi0    1  1024  Z0: 16 folds
github.com/difctl/difctl/kernels/crc32c.hybridBlocksZ1.abi0    1  1024  Z1: 1 CRC32 + 15 folds
github.com/difctl/difctl/kernels/crc32c.hybridBlocksZ2.abi0    1  1024  Z2: 2 CRC32 + 14 folds
github.com/difctl/difctl/kernels/crc32c.hybridBlocksZ3.abi0    1  1024  Z3: 3 CRC32 + 13 folds
github.com/difctl/difctl/kernels/crc32c.hybridBlocksZ2SU4.abi0  1  4096  Z2SU4: 2 CRC32 x 2 chains + 14 folds, 4 steps
github.com/difctl/difctl/kernels/crc32c.hybridBlocksZ3SU4.abi0  1  4096  Z3SU4: 3 CRC32 x 2 chains + 13 folds, 4 steps
github.com/difctl/difctl/kernels/crc32c.hybridBlocksZ4U4.abi0   1  4096  Z4U4: 4 CRC32 + 12 folds, 4 steps
github.com/difctl/difctl/kernels/crc32c.hybridBlocksZ5U4.abi0   1  4096  Z5U4: 5 CRC32 + 11 folds, 4 steps
github.com/difctl/difctl/kernels/crc32c.hybridBlocksZ3U4.abi0   1  4096  Z3U4: 3 CRC32 + 13 folds, 4 steps
github.com/difctl/difctl/kernels/crc32c.hybridBlocks256.abi0    1   192  ymm 3+3: 3 CRC32 + 3 folds
github.com/difctl/difctl/kernels/crc32c.hybridBlocks256S.abi0   1   192  ymm 2x2+4: 2 CRC32 x 2 chains + 4 folds
github.com/difctl/difctl/kernels/crc32c.hybridBlocksZA1.abi0   3  1024  ZA1: 1 CRC32 + 15 aligned folds
github.com/difctl/difctl/kernels/crc32c.foldBlocksAVX512.abi0  1   256  fold: 4 blocks
'

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
GOARCH=amd64 go test -c -o "$tmp/crc32c.test" ./kernels/crc32c
"$OBJDUMP" -d --no-show-raw-insn "$tmp/crc32c.test" >"$tmp/all.dis"

printf '%-36s %5s' "loop" "B/it"
for cpu in $CPUS; do printf ' %-24s' "$cpu"; done
printf '\n'
while read -r sym n bytes label; do
  [ -z "$sym" ] && continue
  awk -v s="<$sym>:" '$2 == s { f = 1; next } f && /^$/ { exit } f' "$tmp/all.dis" >"$tmp/sym.dis"
  if [ ! -s "$tmp/sym.dis" ]; then printf '%-36s not found\n' "$label"; continue; fi
  # The n-th backward branch: a jump whose target address is below its own
  # (addresses of one binary are hex strings of one width: compared as
  # strings, padded, they order as numbers).
  read -r from to < <(awk -v n="$n" '
    { addr = sprintf("%16s", substr($1, 1, length($1) - 1)) }
    $2 ~ /^j/ && $3 ~ /^[0-9a-f]+$/ { t = sprintf("%16s", $3); if (t "" < addr "" && ++k == n) { print $3, substr($1, 1, length($1) - 1); exit } }
  ' "$tmp/sym.dis")
  awk -v from="$from" -v to="$to" '
    { a = substr($1, 1, length($1) - 1) }
    a == from { on = 1 }
    on { $1 = ""; sub(/<.*>/, ""); print }
    a == to { exit }
  ' "$tmp/sym.dis" | sed -E 's/^ *(j[a-z]+) .*/\1 loop/' | (echo 'loop:'; cat) >"$tmp/piece.s"
  printf '%-36s %5d' "$label" "$bytes"
  for cpu in $CPUS; do
    # A CPU without the instructions (AVX-512 on znver2) makes llvm-mca
    # fail: "n/a".
    c=$("$MCA" -mcpu="$cpu" -iterations="$ITER" "$tmp/piece.s" 2>/dev/null | awk '/^Total Cycles:/ { print $3 }' || true)
    if [ -z "$c" ]; then printf ' %-24s' "n/a"; continue; fi
    awk -v c="$c" -v it="$ITER" -v b="$bytes" 'BEGIN { printf " %7.1f c/it %6.3f c/B  ", c / it, c / it / b }'
  done
  printf '\n'
done <<<"$table"
