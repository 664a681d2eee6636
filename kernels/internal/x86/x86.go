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

// AMD reports a CPU whose CPUID vendor string is "AuthenticAMD", and
// Family its display family (CPUID leaf 1: the base family, plus the
// extended family when the base is 15), as /proc/cpuinfo's "cpu family"
// shows it: 23 for AMD Zen 2, 25 for Zen 3 and Zen 4, 6 for Intel's cores.
// The kernels pick between implementations by features; the family is for
// the few choices that rest on how a core schedules them (crc32c's split
// between its CRC32 unit and the carry-less multiplier, which Zen 4 runs on
// 256-bit halves). Zero and false off amd64 and with the purego tag.
var AMD, Family = vendorFamily()
