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

here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
CPUS=${CPUS:-"znver2 znver3 znver4 sapphirerapids"}
ITER=${ITER:-300}
MCA=${MCA:-llvm-mca-19}
OBJDUMP=${OBJDUMP:-objdump}

#   symbol                                        loop  bytes  label
table='
golang.org/x/crypto/internal/poly1305.update.abi0   1    16   x/crypto: MULQ, 1 block x 1 chunk
github.com/difctl/difctl/kernels/poly1305.lanesAVX2.abi0        1   256   avx2: 4 blocks x 4 chunks
github.com/difctl/difctl/kernels/poly1305.lanesHybridAVX2.abi0  1   384   hybrid: 6 blocks x 4 chunks
github.com/difctl/difctl/kernels/poly1305.lanesAVX2R8.abi0      1   512   avx2r8: 4 blocks x 8 chunks
github.com/difctl/difctl/kernels/poly1305.lanesHybridR8.abi0    1   768   hybrid8: 6 blocks x 8 chunks
github.com/difctl/difctl/kernels/poly1305.lanesIFMA.abi0        1   512   avx512ifma: 8 blocks x 4 chunks
'

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
GOARCH=amd64 go test -c -o "$tmp/poly.test" ./kernels/poly1305
"$OBJDUMP" -d --no-show-raw-insn "$tmp/poly.test" >"$tmp/all.dis"

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
