package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestVZEROUPPER pins the rule of gen.vzeroupper in every generated fold
// kernel: a kernel that names a YMM or ZMM register executes VZEROUPPER
// before each RET (else the SSE code that follows it pays the transition
// penalty of a dirty upper state, or worse, on Intel), and an XMM kernel has
// none (it would cost a measurable share of a 16-byte Update for nothing:
// VEX.128 instructions zero the upper bits they write).
func TestVZEROUPPER(t *testing.T) {
	wide := regexp.MustCompile(`\b[YZ]([0-9]|[12][0-9]|3[01])\b`)
	for _, s := range crcs {
		asm, err := generateAsm(s, []string{"go", "run", "./fold"})
		if err != nil {
			t.Fatal(err)
		}
		funcs := strings.Split(string(asm), "\nTEXT ")[1:]
		if len(funcs) == 0 {
			t.Fatalf("crc=%s: no TEXT in the generated assembly", s.flag)
		}
		for _, f := range funcs {
			name, _, _ := strings.Cut(f, "(")
			var lines []string
			for _, l := range strings.Split(f, "\n") {
				if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "//") {
					lines = append(lines, l)
				}
			}
			usesWide := wide.MatchString(f)
			rets, zeroed := 0, 0
			for i, l := range lines {
				if l != "RET" {
					continue
				}
				rets++
				if i > 0 && lines[i-1] == "VZEROUPPER" {
					zeroed++
				}
			}
			switch {
			case rets == 0:
				t.Errorf("crc=%s %s: no RET", s.flag, name)
			case usesWide && zeroed != rets:
				t.Errorf("crc=%s %s uses YMM/ZMM registers but %d of its %d RETs lack a VZEROUPPER", s.flag, name, rets-zeroed, rets)
			case !usesWide && strings.Contains(f, "VZEROUPPER"):
				t.Errorf("crc=%s %s uses only XMM registers but executes VZEROUPPER", s.flag, name)
			}
		}
	}
}
