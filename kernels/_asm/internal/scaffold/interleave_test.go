package scaffold

import (
	"strings"
	"testing"

	"github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// Record takes what emit writes to *c into a list and leaves *c as it
// was; Interleave spreads the second list evenly among the first.
func TestRecordInterleave(t *testing.T) {
	c := build.NewContext()
	c.Function("f")
	c.Attributes(0)
	c.SignatureExpr("func()")
	orig := c
	emit := func(r reg.Register, n int) func() {
		return func() {
			for i := 0; i < n; i++ {
				c.ADDQ(operand.U8(i), r)
			}
		}
	}
	a, err := Record(&c, emit(reg.RAX, 4))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Record(&c, emit(reg.RBX, 2))
	if err != nil {
		t.Fatal(err)
	}
	if c != orig {
		t.Fatal("Record did not restore the context")
	}
	if len(a) != 4 || len(b) != 2 {
		t.Fatalf("recorded %d and %d instructions, want 4 and 2", len(a), len(b))
	}
	Interleave(c, a, b)
	c.RET()
	asm, err := Asm(c, []string{"go", "run", "./test"}, "p")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range strings.Split(string(asm), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "ADDQ" {
			got = append(got, f[1]+f[2])
		}
	}
	want := "$0x00,AX $0x01,AX $0x00,BX $0x02,AX $0x03,AX $0x01,BX"
	if strings.Join(got, " ") != want {
		t.Fatalf("interleaved %v, want %s", got, want)
	}
}

// ParamAddr is the argument's frame slot, and panics on a name the
// signature lacks.
func TestParamAddr(t *testing.T) {
	c := build.NewContext()
	c.Function("f")
	c.SignatureExpr("func(a *byte, n int)")
	if got := ParamAddr(c, "n").Asm(); got != "n+8(FP)" {
		t.Fatalf("n at %s, want n+8(FP)", got)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("no panic on an unknown parameter")
		}
	}()
	ParamAddr(c, "m")
}
