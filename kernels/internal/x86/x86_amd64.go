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

func vendorFamily() (amd bool, family int) {
	maxLeaf, ebx, ecx, edx := cpuid(0, 0)
	// "AuthenticAMD" in EBX, EDX, ECX.
	amd = ebx == 0x68747541 && edx == 0x69746e65 && ecx == 0x444d4163
	if maxLeaf < 1 {
		return amd, 0
	}
	eax, _, _, _ := cpuid(1, 0)
	family = int(eax>>8) & 0xf
	if family == 0xf {
		family += int(eax>>20) & 0xff
	}
	return amd, family
}
