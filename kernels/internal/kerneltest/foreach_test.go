package kerneltest

import "testing"

// TestMustRun checks the CI rule of ForEach: an unavailable implementation
// whose flags the CPU reports is a failure; one that needs a flag the CPU
// lacks, or that mustRun does not list, is not.
func TestMustRun(t *testing.T) {
	if !hasCPUFlags([]string{"fpu"}) {
		t.Skip("needs /proc/cpuinfo on linux/amd64")
	}
	mustRun["mustrun/present"] = []string{"fpu", "sse2"}
	mustRun["mustrun/absent"] = []string{"fpu", "no-such-flag"}
	defer delete(mustRun, "mustrun/present")
	defer delete(mustRun, "mustrun/absent")
	if msg := mustRunFailure("mustrun", "present"); msg == "" {
		t.Error("an implementation whose flags are all present is not reported")
	}
	if msg := mustRunFailure("mustrun", "absent"); msg != "" {
		t.Errorf("reported for a missing flag: %s", msg)
	}
	if msg := mustRunFailure("mustrun", "unlisted"); msg != "" {
		t.Errorf("reported for an unlisted implementation: %s", msg)
	}
}
