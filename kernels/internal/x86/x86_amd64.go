//go:build !purego

package x86

// cpuid executes CPUID with the given leaf and subleaf.
//
//go:noescape
func cpuid(leaf, subleaf uint32) (eax, ebx, ecx, edx uint32)

// detects tells tests that this build reads CPUID.
const detects = true

func hasVPCLMULQDQ() bool {
	if maxLeaf, _, _, _ := cpuid(0, 0); maxLeaf < 7 {
		return false
	}
	_, _, ecx, _ := cpuid(7, 0)
	return ecx&(1<<10) != 0
}

// CPUID exposes the instruction to tests that derive features on their own.
func CPUID(leaf, subleaf uint32) (eax, ebx, ecx, edx uint32) { return cpuid(leaf, subleaf) }
