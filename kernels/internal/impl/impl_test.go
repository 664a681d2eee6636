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
