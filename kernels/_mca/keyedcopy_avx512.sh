#!/usr/bin/env bash
# keyedcopy_avx512.sh models, with llvm-mca, the main loops of the one-pass
# AVX-512 keyed copy (kernels/keyedcopy's fusedPolyCopyZ: a four-row step
# of a pair of blocks, 512 bytes) and of the two passes it is measured
# against (keyedcopy's pair: t10crc32c's fusedBlocksCopyZG, 128 bytes of a
# block an iteration, then poly1305's lanesIFMAS, a four-row step of a
# pair, 512 bytes), on the code the Go toolchain emits, as
# crc32c_avx512.sh does: cycles per iteration and per byte, the pass
# rows summed, and each loop's busiest ports.
#
# Usage: kernels/_mca/keyedcopy_avx512.sh
# Environment: CPUS (default "sapphirerapids znver4"), ITER (300),
# MCA (llvm-mca-19, Debian llvm-19), OBJDUMP (objdump).
set -euo pipefail

. "$(dirname "$0")/lib.sh"
mca_init "sapphirerapids znver4"
pkg=github.com/difctl/difctl/kernels

#   symbol                          loop  bytes  label
table="
$pkg/keyedcopy.fusedPolyCopyZ.abi0   1  512  one pass: fusedPolyCopyZ
$pkg/t10crc32c.fusedBlocksCopyZG.abi0 1  128  pass 1: fusedBlocksCopyZG
$pkg/poly1305.lanesIFMAS.abi0        1  512  pass 2: lanesIFMAS
"

mca_dis keyedcopy

declare -A sum
printf '%-30s %5s' "loop" "B/it"
for cpu in $CPUS; do printf ' %-44s' "$cpu"; done
printf '\n'
while read -r sym n bytes label; do
  [ -z "$sym" ] && continue
  if ! mca_sym keyedcopy "$sym"; then printf '%-30s not found\n' "$label"; continue; fi
  mca_loop "$n"
  printf '%-30s %5d' "${label#*: }" "$bytes"
  for cpu in $CPUS; do
    mca_run "$cpu"
    c=$mca_cycles
    if [ -z "$c" ]; then printf ' %-44s' "n/a"; continue; fi
    # The two busiest resources of the pressure-per-iteration table.
    ports=$(awk '/^Resources:/ { r = 1; next } r && /^$/ { r = 0 } r && /^\[/ { name[$1] = $3 } /^Resource pressure per iteration:/ { p = 1; next }
      p == 1 { split($0, h); p = 2; next } p == 2 { for (i = 1; i <= NF; i++) if ($i != "-") print $i, name[h[i]]; exit }' <<<"$mca_out" |
      sort -rn | head -2 | awk '{ printf "%s %.0f ", $2, $1 }')
    cb=$(awk -v c="$c" -v it="$ITER" -v b="$bytes" 'BEGIN { printf "%.4f", c / it / b }')
    sum[$cpu]=$(awk -v a="${sum[$cpu]:-0}" -v b="$cb" -v l="$label" 'BEGIN { print (l ~ /^pass/) ? a + b : a }')
    printf ' %6.1f c/it %.3f c/B %-16s' "$(awk -v c="$c" -v it="$ITER" 'BEGIN { print c / it }')" "$cb" "$ports"
  done
  printf '\n'
done <<<"$table"
printf '%-30s %5s' "two passes, summed" ""
for cpu in $CPUS; do printf '             %.3f c/B %-16s' "${sum[$cpu]}" ""; done
printf '\n'
