#!/usr/bin/env bash
# The NBD ratio table (docs/performance.md): BenchmarkVsQemuNBD, difctl's
# server against qemu-nbd on the same page-cached 1 GiB image, the two
# alternating in every iteration, in two runs:
#   idle: everything (the test binary, its server process, qemu-nbd, nbdcopy,
#         fio) pinned to CPU 0 with taskset, CPU 1 (its SMT sibling) left alone;
#   busy: the same, with a shell busy loop pinned to CPU 1 for the whole run.
# Each run prints `uptime` before and after (other work on the machine shows
# in the load average). About 3 minutes per run at -benchtime 3x.
#   blockdev/nbd/testdata/ratio.sh [BENCHTIME]     (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/../../.."
bt=${1:-3x}
bin=$(mktemp -d)/nbd.test
go test -c -o "$bin" ./blockdev/nbd
cd blockdev/nbd
bench() {
	echo "--- $1: $(date -u +%FT%TZ)"; uptime
	taskset -c 0 "$bin" -test.run '^$' -test.bench VsQemuNBD -test.benchtime "$bt" | grep -E '^Benchmark|^ok|FAIL'
	uptime
}
bench idle
taskset -c 1 sh -c 'while :; do :; done' &
spin=$!
trap 'kill $spin 2>/dev/null' EXIT
bench "busy (spinner pid $spin on CPU 1)"
kill $spin
