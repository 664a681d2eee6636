package x86

import (
	"os"
	"runtime"
	"strconv"
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

// TestVendorFamilyAgainstProcCPUInfo: AMD and Family are what
// /proc/cpuinfo says of the first CPU ("vendor_id", "cpu family").
func TestVendorFamilyAgainstProcCPUInfo(t *testing.T) {
	if !detects || runtime.GOOS != "linux" {
		t.Skip("needs linux/amd64 without the purego tag")
	}
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skip(err)
	}
	vendor, family := "", ""
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		switch k = strings.TrimSpace(k); {
		case !ok:
		case k == "vendor_id" && vendor == "":
			vendor = strings.TrimSpace(v)
		case k == "cpu family" && family == "":
			family = strings.TrimSpace(v)
		}
	}
	if vendor == "" || family == "" {
		t.Skip("/proc/cpuinfo has no vendor_id or cpu family")
	}
	if AMD != (vendor == "AuthenticAMD") || strconv.Itoa(Family) != family {
		t.Fatalf("AMD = %v, Family = %d; /proc/cpuinfo says vendor %s, family %s", AMD, Family, vendor, family)
	}
}
