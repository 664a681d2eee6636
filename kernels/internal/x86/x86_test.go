package x86

import (
	"os"
	"runtime"
	"strings"
	"testing"
)

// The bit agrees with the kernel's own report in /proc/cpuinfo.
func TestAgainstProcCPUInfo(t *testing.T) {
	if !detects || runtime.GOOS != "linux" {
		t.Skip("needs linux/amd64 without the purego tag")
	}
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skip(err)
	}
	var flags []string
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			flags = strings.Fields(v)
			break
		}
	}
	want := false
	for _, f := range flags {
		want = want || f == "vpclmulqdq"
	}
	if HasVPCLMULQDQ != want {
		t.Fatalf("HasVPCLMULQDQ = %v, /proc/cpuinfo says %v", HasVPCLMULQDQ, want)
	}
}
