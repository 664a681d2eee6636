#!/usr/bin/env bash
# crc_nvme.sh models the arm64 inner loops of kernels/crc32c and
# kernels/crc64nvme with llvm-mca-14, on paper: this machine is amd64, and
# qemu runs the code but says nothing about its speed.
#
# For every line of the table below it builds the package's arm64 test
# binary (GOARCH=arm64 go test -c), disassembles the symbol with
# llvm-objdump-14, cuts out one piece and feeds it to llvm-mca-14 for each CPU
# in $CPUS (default: cortex-a53 cortex-a72 apple-m1):
#
#	loop:N   the body of the N-th backward branch of the function (from its
#	         target to the branch), run for $ITER iterations; the result is
#	         cycles per iteration and, divided by the bytes one iteration
#	         consumes, cycles per byte (c/B).
#	after:N  the straight-line code after the N-th backward branch, up to the
#	         next branch or ret, run once: a fixed cost (merge, reduction),
#	         in cycles.
#	target:N the same from the target of the N-th branch (any direction).
#
# Usage: kernels/_mca/crc_nvme.sh [-v]    (-v prints each extracted piece)
#
# The models are llvm's: the Cortex-A72 one is the A57 model, apple-m1 is the
# Cyclone model (one PMULL per cycle, CRC32CX latency 2), so read the numbers
# as ratios between kernels on one CPU rather than as measurements.
set -euo pipefail

cd "$(dirname "$0")/../.."
CPUS=${CPUS:-"cortex-a53 cortex-a72 apple-m1"}
ITER=${ITER:-300}
MCA=${MCA:-llvm-mca-14}
OBJDUMP=${OBJDUMP:-llvm-objdump-14}
verbose=false
[[ ${1:-} == -v ]] && verbose=true

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# package  symbol (prefixed with the package path unless it contains a '/')
#          piece  bytes/iteration  label
table='
crc32c     crcHW.abi0                        loop:1   64  crc32c crc: one CRC32CX stream
crc32c     crc4way.abi0                      loop:1  128  crc32c pmull4way: 4 CRC32CX streams
crc32c     crc4way.abi0                      target:3  0  crc32c pmull4way: PMULL merge per chunk
crc32c     crcBlocks.abi0                    loop:1  128  crc32c Blocks: 4 blocks on 4 streams
crc32c     hash/crc32.castagnoliUpdate.abi0  loop:1   16  crc32c generic: hash/crc32 (CRC32CX, 16 B/iter)
crc32c     hash/crc32.slicingUpdate          loop:1    8  crc32c generic without CRC32: slicing-by-8 (Go)
crc64nvme  foldUpdatePMULL.abi0                    loop:1  128  crc64nvme pmull: 8 accumulators
crc64nvme  foldUpdatePMULL.abi0                    loop:2   16  crc64nvme pmull: 1 accumulator (short inputs)
crc64nvme  foldUpdatePMULL.abi0                    after:2   0  crc64nvme pmull: Barrett reduction
crc64nvme  foldBlocksPMULL.abi0                  loop:1  128  crc64nvme Blocks: 4 blocks x 2 accumulators
crc64nvme  updateGeneric                     loop:1    8  crc64nvme generic: slicing-by-8 (Go)
'

declare -A built
bin_for() {
	local pkg=$1
	if [[ -z ${built[$pkg]:-} ]]; then
		GOARCH=arm64 go test -c -o "$work/$pkg.test" "./kernels/$pkg/" >&2
		built[$pkg]=1
	fi
	echo "$work/$pkg.test"
}

# extract BIN SYMBOL PIECE: prints the piece as assembly llvm-mca accepts,
# every branch target replaced by a local label.
extract() {
	"$OBJDUMP" -d --no-show-raw-insn --mattr=+crc,+aes --disassemble-symbols="$2" "$1" |
		awk -v piece="$3" '
		function hex(s,   i, v) {
			sub(/^0x/, "", s)
			for (i = 1; i <= length(s); i++) v = v * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1
			return v
		}
		/^ +[0-9a-f]+:/ {
			addr = hex(substr($1, 1, length($1) - 1))
			$1 = ""
			sub(/^ +/, "")
			sub(/ *<.*>$/, "")
			sub(/[ \t]*\/\/.*$/, "")
			n++; A[n] = addr; I[n] = $0
			if ($1 ~ /^(b|b\..*|cbz|cbnz|tbz|tbnz)$/ && match($0, /0x[0-9a-f]+$/)) {
				T[n] = hex(substr($0, RSTART, RLENGTH))
				sub(/0x[0-9a-f]+$/, ".Ltarget", I[n])
			}
		}
		END {
			split(piece, p, ":"); want = p[2]; k = 0
			for (i = 1; i <= n; i++) {
				if (!(i in T)) continue
				if (p[1] != "target" && T[i] > A[i]) continue
				if (++k != want) continue
				if (p[1] == "loop") {
					print ".Ltarget:"
					for (j = 1; j <= i; j++) if (A[j] >= T[i]) print I[j]
				} else {
					from = i + 1
					if (p[1] == "target") for (from = 1; A[from] < T[i]; from++) {}
					print ".Ltarget:"
					for (j = from; j <= n; j++) {
						print I[j]
						if ((j in T) || I[j] ~ /^ret/) break
					}
				}
				exit
			}
			print "no backward branch " want > "/dev/stderr"; exit 1
		}'
}

printf '%-52s %-8s' "kernel (piece)" "B/iter"
for cpu in $CPUS; do printf ' %16s' "$cpu"; done
printf '\n'
while read -r pkg sym piece bytes label; do
	[[ -z $pkg ]] && continue
	full=$sym
	[[ $sym == */* ]] || full="github.com/difctl/difctl/kernels/$pkg.$sym"
	bin=$(bin_for "$pkg")
	extract "$bin" "$full" "$piece" >"$work/piece.s"
	if $verbose; then
		echo "## $label ($full $piece)"
		cat "$work/piece.s"
	fi
	printf '%-52s %-8s' "$label" "$bytes"
	for cpu in $CPUS; do
		iter=$ITER
		[[ $piece == loop:* ]] || iter=1
		cycles=$("$MCA" -mtriple=aarch64 -mcpu="$cpu" -mattr=+crc,+aes -iterations="$iter" "$work/piece.s" 2>/dev/null |
			awk '/^Total Cycles:/ {print $3}')
		if [[ $piece != loop:* ]]; then
			printf ' %16s' "$cycles cyc"
		else
			awk -v c="$cycles" -v n="$iter" -v b="$bytes" \
				'BEGIN { printf " %7.1f c/it %4.2f c/B", c / n, c / n / b }'
		fi
	done
	printf '\n'
done <<<"$table"
