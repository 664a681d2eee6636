package impl

import "testing"

func TestRegistry(t *testing.T) {
	var got []string
	Register("t", "fast", false, func() { got = append(got, "fast") })
	Register("t", "mid", true, func() { got = append(got, "mid") })
	Register("t", "slow", true, func() { got = append(got, "slow") })
	if a := Active("t"); a != "mid" {
		t.Fatalf("Active = %q, want mid (first available)", a)
	}
	if err := Select("t", "fast"); err == nil {
		t.Fatal("Select of an unavailable implementation succeeded")
	}
	if err := Select("t", "nope"); err == nil {
		t.Fatal("Select of an unknown implementation succeeded")
	}
	if err := Select("t", "slow"); err != nil {
		t.Fatal(err)
	}
	if a := Active("t"); a != "slow" {
		t.Fatalf("Active = %q after Select, want slow", a)
	}
	Reset("t")
	if a := Active("t"); a != "mid" {
		t.Fatalf("Active = %q after Reset, want mid", a)
	}
	want := []string{"mid", "slow", "mid"}
	if len(got) != len(want) {
		t.Fatalf("activations %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("activations %v, want %v", got, want)
		}
	}
	l := List("t")
	if len(l) != 3 || l[0].Available || !l[1].Active {
		t.Fatalf("List = %+v", l)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("duplicate Register did not panic")
		}
	}()
	Register("t", "mid", true, func() {})
}

func TestForced(t *testing.T) {
	t.Setenv("DIFCTL_KERNELS", "u=slow, v=x")
	Register("u", "fast", true, func() {})
	Register("u", "slow", true, func() {})
	if a := Active("u"); a != "slow" {
		t.Fatalf("Active = %q, want slow (forced)", a)
	}
	if n, ok := Forced("v"); !ok || n != "x" {
		t.Fatalf("Forced(v) = %q, %v", n, ok)
	}
}

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
