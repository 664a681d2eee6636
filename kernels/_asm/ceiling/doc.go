// Package ceiling measures the carry-less multiplier of the machine it runs
// on, the bound of every fold kernel: run
//
//	go test -run '^$' -bench . ./ceiling
//
// from kernels/_asm. Each benchmark times an instruction loop against a
// chain of dependent ADDQs (one per cycle) in the same iterations and
// reports cycles per instruction. A fold needs two 64x64 multiplies per
// 16-byte lane, so the ceiling of a kernel is 16·lanes/(2·cycles) bytes per
// cycle. On the AMD Zen 3 and Zen 2 machines the kernels were tuned on it
// found the multiplier to be the bound of a fused T10-DIF and CRC-32C pass
// too: CRC32Q does not slow the multiplies it is mixed with (step=fused is
// that kernel's step). docs/perf/poly1305-generator.md ("The CRC kernels")
// has the figures.
package ceiling
