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

here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
CPUS=${CPUS:-"znver3 alderlake"}
ITER=${ITER:-300}
MCA=${MCA:-llvm-mca-19}
OBJDUMP=${OBJDUMP:-objdump}

#   package    symbol                                                loop  bytes  label
table='
crc32c     github.com/difctl/difctl/kernels/crc32c.updateEntryY.abi0        1  64  crc32c fold, 2 YMM
crc32c     github.com/difctl/difctl/kernels/crc32c.hybridShort3.abi0        2  24  crc32c 3 CRC32 streams
crc32c     github.com/difctl/difctl/kernels/crc32c.hybridShort.abi0         1  16  crc32c 1 CRC32 stream
crct10dif  github.com/difctl/difctl/kernels/crct10dif.updateEntryY.abi0     1  64  t10dif fold, 2 YMM
crc64nvme  github.com/difctl/difctl/kernels/crc64nvme.updateEntryY.abi0     1  64  crc64nvme fold, 2 YMM
'
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for p in crc32c crct10dif crc64nvme; do
  GOARCH=amd64 go test -c -o "$tmp/$p.test" ./kernels/$p
  "$OBJDUMP" -d --no-show-raw-insn "$tmp/$p.test" >"$tmp/$p.dis"
done

printf '%-36s %5s' "loop" "B/it"
for cpu in $CPUS; do printf ' %-24s' "$cpu"; done
printf '\n'
while read -r pkg sym n bytes label; do
  [ -z "$sym" ] && continue
  awk -v s="<$sym>:" '$2 == s { f = 1; next } f && /^$/ { exit } f' "$tmp/$pkg.dis" >"$tmp/sym.dis"
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
