//go:build !amd64 || purego

package x86

// detects tells tests that this build does not read CPUID.
const detects = false

func hasVPCLMULQDQ() bool { return false }

func vendorFamily() (amd bool, family int) { return false, 0 }
