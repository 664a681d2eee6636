#!/usr/bin/env bash
# run.sh models the arm64 kernels with llvm-mca on the code the Go toolchain
# actually emits: it builds each package's arm64 test binary
# (GOARCH=arm64 go test -c), disassembles one symbol with
# aarch64-linux-gnu-objdump, cuts out a piece, rewrites branch targets as a
# local label, and runs llvm-mca-14 on it for every CPU in $CPUS. See
# README.md in this folder.
#
# Usage: kernels/_mca/run.sh [-v] [filter]
#   -v      print every extracted piece before its numbers
#   filter  only rows whose package or label contains this string
# Environment: CPUS (default "cortex-a53 cortex-a72 apple-m1"), ITER (300),
# MCA (llvm-mca-14), OBJDUMP (aarch64-linux-gnu-objdump).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
CPUS=${CPUS:-"cortex-a53 cortex-a72 apple-m1"}
ITER=${ITER:-300}
MCA=${MCA:-llvm-mca-14}
OBJDUMP=${OBJDUMP:-aarch64-linux-gnu-objdump}
verbose=false
if [[ ${1:-} == -v ]]; then verbose=true; shift; fi
filter=${1:-}

# One row per modelled piece:
#   package  symbol  piece  bytes  label
# package: a folder under kernels/ (its arm64 test binary is built once), or
#          "-" for a hand-written reference file in this folder.
# symbol:  the Go symbol; without a '/' it is prefixed with the package path.
#          Assembly functions end in .abi0. For "-" rows: the .s file.
# piece:   loop:N   body of the N-th backward branch of the symbol (branch
#                   target to branch), iterated: cycles per iteration, and
#                   per byte when bytes > 0;
#          after:N  straight-line code after the N-th backward branch up to
#                   the next branch or ret, run once: cycles (a fixed cost:
#                   collapse, reduction);
#          entry    from the first instruction to the first branch, run
#                   once: cycles (set-up and first lane);
#          file     the whole reference file, iterated.
# bytes:   bytes consumed by one iteration (0 for fixed costs).
# To model another kernel add a row, e.g.
#   crc64nvme  foldUpdatePMULL.abi0  loop:1  128  crc64nvme pmull: 8 accumulators
table='
-          ref_fold8.s        file     128  reference: plain fold-by-8 PMULL 64x64
crct10dif  foldUpdatePMULL.abi0   loop:1   128  crct10dif pmull: 8 accumulators
crct10dif  foldUpdatePMULL.abi0   loop:2    16  crct10dif pmull: 1 accumulator (tail)
crct10dif  foldUpdatePMULL.abi0   entry      0  crct10dif pmull: set-up, head, lane 0
crct10dif  foldUpdatePMULL.abi0   after:2    0  crct10dif pmull: Barrett reduction
crct10dif  foldBlocksPMULL.abi0   loop:1   128  crct10dif pmull Blocks: 8 blocks
crct10dif  foldBlocksPMULL.abi0   after:1    0  crct10dif pmull Blocks: 8 reductions
crct10dif  foldUpdatePMULL8.abi0  loop:1    64  crct10dif pmull8: 4 accumulators
crct10dif  foldUpdatePMULL8.abi0  loop:2    16  crct10dif pmull8: 1 accumulator (tail)
crct10dif  foldUpdatePMULL8.abi0  entry      0  crct10dif pmull8: set-up, head, lane 0
crct10dif  foldUpdatePMULL8.abi0  after:2    0  crct10dif pmull8: reduction
crct10dif  foldBlocksPMULL8.abi0  loop:1    64  crct10dif pmull8 Blocks: 4 blocks
crct10dif  foldBlocksPMULL8.abi0  after:1    0  crct10dif pmull8 Blocks: 4 reductions
crct10dif  updateGeneric      loop:1    16  crct10dif generic: slicing-by-16 (Go)
crct10dif  updateGeneric      loop:2     1  crct10dif generic: bytewise tail (Go)
crc32c     crcHW.abi0                        loop:1    64  crc32c crc: one CRC32CX stream
crc32c     crc4way.abi0                      loop:1   128  crc32c pmull4way: 4 CRC32CX streams
crc32c     crc4way.abi0                      entry      0  crc32c pmull4way: set-up, first loads
crc32c     crcBlocks.abi0                    loop:1   128  crc32c Blocks: 4 blocks on 4 streams
crc32c     hash/crc32.castagnoliUpdate.abi0  loop:1    16  crc32c generic: hash/crc32 CRC32CX loop
crc32c     hash/crc32.slicingUpdate          loop:1     8  crc32c generic without CRC32: slicing-by-8 (Go)
crc64nvme  foldUpdatePMULL.abi0                    loop:1   128  crc64nvme pmull: 8 accumulators
crc64nvme  foldUpdatePMULL.abi0                    loop:2    16  crc64nvme pmull: 1 accumulator
crc64nvme  foldUpdatePMULL.abi0                    after:2    0  crc64nvme pmull: Barrett reduction
crc64nvme  foldBlocksPMULL.abi0                  loop:1   128  crc64nvme pmull Blocks: 4 blocks x 2 accumulators
crc64nvme  updateGeneric                     loop:1     8  crc64nvme generic: slicing-by-8 (Go)
poly1305   lanesNEON.abi0                    loop:1   128  poly1305 neon: 2 blocks x 4 chunks, quad step
poly1305   (*state).chunks                   loop:1    16  poly1305 generic: one chunk, bits.Mul64 (Go)
'

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

declare -A built
binary() { # binary PKG: path of the package's arm64 test binary
	local pkg=$1
	if [[ -z ${built[$pkg]:-} ]]; then
		GOARCH=arm64 go test -c -o "$work/$pkg.test" "./kernels/$pkg/" >&2
		built[$pkg]=1
	fi
	echo "$work/$pkg.test"
}

# piece BIN SYMBOL PIECE: the piece as llvm-mca input.
piece() {
	"$OBJDUMP" -d --no-show-raw-insn --disassemble="$2" "$1" | awk -v piece="$3" '
	function hex(s,   i, v) {
		s = tolower(s); sub(/^0x/, "", s); v = 0
		for (i = 1; i <= length(s); i++) v = v * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1
		return v
	}
	/^ +[0-9a-f]+:\t/ {
		split($0, f, "\t")
		ins = f[2]
		for (i = 3; i in f; i++) ins = ins "\t" f[i]
		sub(/[ \t]*\/\/.*$/, "", ins)
		a = f[1]; gsub(/[ :]/, "", a)
		n++; A[n] = hex(a); I[n] = ins
		split(ins, w, /[ \t]+/)
		if (w[1] ~ /^(b|b\.[a-z]+|cbz|cbnz|tbz|tbnz)$/ && match(ins, /[0-9a-f]+ <[^>]*>$/)) {
			tgt = substr(ins, RSTART, RLENGTH); sub(/ .*/, "", tgt)
			T[n] = hex(tgt)
			sub(/[0-9a-f]+ <[^>]*>$/, ".Lt", I[n])
		} else if (w[1] ~ /^(b|b\.[a-z]+|cbz|cbnz|tbz|tbnz|ret)$/) {
			T[n] = -1
		} else if (w[1] == "adrp" || w[1] == "adr") {
			sub(/[0-9a-f]+ <[^>]*>$/, ".Lt", I[n]) # address of a symbol
		}
	}
	END {
		split(piece, p, ":")
		if (p[1] == "entry") {
			print ".Lt:"
			for (j = 1; j <= n; j++) { if (j in T) break; print I[j] }
			exit
		}
		k = 0
		for (i = 1; i <= n; i++) {
			if (!(i in T) || T[i] < 0 || T[i] > A[i] || ++k != p[2]) continue
			print ".Lt:"
			if (p[1] == "loop") {
				for (j = 1; j <= i; j++) if (A[j] >= T[i]) print I[j]
			} else {
				for (j = i + 1; j <= n; j++) { if (j in T) break; print I[j] }
			}
			exit
		}
		print "run.sh: no backward branch " p[2] > "/dev/stderr"; exit 1
	}'
}

printf '%-48s %5s' "kernel: piece" "B/it"
for cpu in $CPUS; do printf ' %-22s' "$cpu"; done
printf '\n'
while read -r pkg sym kind bytes label; do
	[[ -z $pkg ]] && continue
	[[ -n $filter && $pkg != *"$filter"* && $label != *"$filter"* ]] && continue
	if [[ $pkg == - ]]; then
		cp "$here/$sym" "$work/piece.s"
	else
		full=$sym
		[[ $sym == */* ]] || full="github.com/difctl/difctl/kernels/$pkg.$sym"
		if ! piece "$(binary "$pkg")" "$full" "$kind" >"$work/piece.s" 2>"$work/err" || [[ ! -s $work/piece.s ]]; then
			printf '%-48s %5s %s\n' "$label" "$bytes" "not found: $full $kind"
			continue
		fi
	fi
	if $verbose; then
		echo "## $label ($kind)"
		cat "$work/piece.s"
	fi
	iter=$ITER
	[[ $kind == after:* || $kind == entry ]] && iter=1
	printf '%-48s %5s' "$label" "$bytes"
	for cpu in $CPUS; do
		"$MCA" -mtriple=aarch64 -mcpu="$cpu" -mattr=+aes -iterations="$iter" "$work/piece.s" >"$work/mca.out" ||
			{ echo "run.sh: llvm-mca failed on $label" >&2; exit 1; }
		cycles=$(awk '/^Total Cycles:/ { print $3 }' "$work/mca.out")
		awk -v c="$cycles" -v n="$iter" -v b="$bytes" 'BEGIN {
			if (n == 1) printf " %-22s", sprintf("%d cyc", c)
			else if (b > 0) printf " %-22s", sprintf("%.1f c/it %.3f c/B", c / n, c / n / b)
			else printf " %-22s", sprintf("%.1f c/it", c / n)
		}'
	done
	printf '\n'
done <<<"$table"
