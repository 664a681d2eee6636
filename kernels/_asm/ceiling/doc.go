// Package ceiling measures the carry-less multiplier of the machine it runs
// on, the bound of every fold kernel: run
//
//	go test -run '^$' -bench . ./ceiling
//
// from kernels/_asm. Each benchmark times an instruction loop against a
// chain of dependent ADDQs (one per cycle) in the same iterations and
// reports cycles per instruction. A fold needs two 64x64 multiplies per
// 16-byte lane, so the ceiling of a kernel is 16·lanes/(2·cycles) bytes per
// cycle: on the Zen 3 EPYC the kernels were tuned on, PCLMULQDQ and
// VPCLMULQDQ (XMM and YMM alike) issue one per 2 cycles with a latency of 4,
// which makes 4 bytes per cycle with XMM and 8 with YMM; a VPERMQ from memory
// (not from a register) takes the multiplier's port for 2 cycles. CRC32Q
// retires one per cycle and does not slow the multiplies it is mixed with
// (2.0 cycles per VPCLMULQDQ with or without eight CRC32Q beside them), so a
// fused T10-DIF and CRC-32C pass is bounded by the multiplier alone: 8 bytes
// per cycle on YMM. In the shape of the fused kernel's step (step=fused:
// four fold chains and four CRC32Q chains from memory over 128 bytes) each
// half takes 16 cycles and both 18: 7.1 bytes per cycle. On the AMD EPYC
// Zen 2 of a later session (no VPCLMULQDQ), PCLMULQDQ on XMM issues one
// per 2 cycles too, and eight CRC32Q beside eight VEX-encoded multiplies
// left them at 2.0 cycles each: the fused XMM kernel is bound by the
// multiplier, 4 bytes per cycle.
package ceiling
