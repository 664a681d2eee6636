# lib.sh: what the amd64 model scripts share (sourced, not run): the
# environment, the disassembly of kernel packages' test binaries, the cut
# of one loop out of a function, llvm-mca's cycles, and the common table.
#
# mca_init DEFAULT_CPUS sets CPUS (default DEFAULT_CPUS), ITER (300), MCA
# (llvm-mca-19, Debian llvm-19) and OBJDUMP (objdump) from the
# environment, moves to the repository's root and makes $tmp, removed on
# exit.
mca_init() {
  cd "$(dirname "${BASH_SOURCE[0]}")/../.."
  CPUS=${CPUS:-$1}
  ITER=${ITER:-300}
  MCA=${MCA:-llvm-mca-19}
  OBJDUMP=${OBJDUMP:-objdump}
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
}

# mca_dis PKG...: builds the test binary of each kernels/PKG for amd64 and
# disassembles it to $tmp/PKG.dis.
mca_dis() {
  local pkg
  for pkg; do
    GOARCH=amd64 go test -c -o "$tmp/$pkg.test" "./kernels/$pkg"
    "$OBJDUMP" -d --no-show-raw-insn "$tmp/$pkg.test" >"$tmp/$pkg.dis"
  done
}

# mca_sym PKG SYM: the disassembly of SYM in $tmp/PKG.dis to $tmp/sym.dis;
# fails if it is not there. A SYM without a dot is kernels/PKG's function
# of that name (its ABI0 body).
mca_sym() {
  local sym=$2
  [[ $sym == *.* ]] || sym="github.com/difctl/difctl/kernels/$1.$sym.abi0"
  awk -v s="<$sym>:" '$2 == s { f = 1; next } f && /^$/ { exit } f' "$tmp/$1.dis" >"$tmp/sym.dis"
  [ -s "$tmp/sym.dis" ]
}

# mca_loop N: the body of $tmp/sym.dis's N-th backward branch (a jump whose
# target is below its own address) to $tmp/piece.s, every jump in it aimed
# at the piece's own label. Addresses of one binary are hex strings of one
# width: padded, they compare as strings as they do as numbers.
mca_loop() {
  local from to
  read -r from to < <(awk -v n="$1" '
    { addr = sprintf("%16s", substr($1, 1, length($1) - 1)) }
    $2 ~ /^j/ && $3 ~ /^[0-9a-f]+$/ { t = sprintf("%16s", $3); if (t "" < addr "" && ++k == n) { print $3, substr($1, 1, length($1) - 1); exit } }
  ' "$tmp/sym.dis")
  awk -v from="$from" -v to="$to" '
    { a = substr($1, 1, length($1) - 1) }
    a == from { on = 1 }
    on { $1 = ""; sub(/<.*>/, ""); print }
    a == to { exit }
  ' "$tmp/sym.dis" | sed -E 's/^ *(j[a-z]+) .*/\1 loop/' | (echo 'loop:'; cat) >"$tmp/piece.s"
}

# mca_run CPU: llvm-mca's report on $tmp/piece.s for CPU into $mca_out,
# and its total cycles into $mca_cycles (empty where llvm-mca fails, as it
# does on a CPU without the piece's instructions: AVX-512 on znver2).
mca_run() {
  mca_out=$("$MCA" -mcpu="$1" -iterations="$ITER" "$tmp/piece.s" 2>/dev/null || true)
  mca_cycles=$(awk '/^Total Cycles:/ { print $3 }' <<<"$mca_out")
}

# mca_table WIDTH: for each line "PKG SYM N BYTES LABEL" of stdin, the N-th
# loop of SYM (mca_sym) on every CPU: cycles an iteration and a byte, the
# label WIDTH characters wide.
mca_table() {
  local w=$1 pkg sym n bytes label cpu
  printf "%-${w}s %5s" "loop" "B/it"
  for cpu in $CPUS; do printf ' %-24s' "$cpu"; done
  printf '\n'
  while read -r pkg sym n bytes label; do
    [ -z "$pkg" ] && continue
    if ! mca_sym "$pkg" "$sym"; then printf "%-${w}s not found\n" "$label"; continue; fi
    mca_loop "$n"
    printf "%-${w}s %5d" "$label" "$bytes"
    for cpu in $CPUS; do
      mca_run "$cpu"
      if [ -z "$mca_cycles" ]; then printf ' %-24s' "n/a"; continue; fi
      awk -v c="$mca_cycles" -v it="$ITER" -v b="$bytes" 'BEGIN { printf " %7.1f c/it %6.3f c/B  ", c / it, c / it / b }'
    done
    printf '\n'
  done
}
