// Package x86 reports the CPU features the amd64 kernels need that
// golang.org/x/sys/cpu does not: x/sys/cpu sets HasAVX512VPCLMULQDQ only
// together with AVX-512, while the VEX-encoded VPCLMULQDQ on YMM registers
// (AMD Zen 3, Intel Ice Lake client without AVX-512 enabled) needs only the
// CPUID bit and AVX2. Every other feature check goes through x/sys/cpu.
package x86

// HasVPCLMULQDQ reports CPUID.(EAX=7,ECX=0):ECX.VPCLMULQDQ[bit 10]: the
// carry-less multiply on YMM (and, with AVX-512, ZMM) registers. Always
// false off amd64 and with the purego tag.
var HasVPCLMULQDQ = hasVPCLMULQDQ()
