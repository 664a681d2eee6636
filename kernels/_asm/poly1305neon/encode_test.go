package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestEncodings checks encodeMulElem against an independent assembler,
// llvm-mc (Debian llvm-14; skipped without it), over every register
// position and element index the fields can take, and checks that every
// WORD of the generated kernel is one of the two instructions its comment
// names.
func TestEncodings(t *testing.T) {
	mc := ""
	for _, name := range []string{"llvm-mc-14", "llvm-mc"} {
		if p, err := exec.LookPath(name); err == nil {
			mc = p
			break
		}
	}
	if mc == "" {
		t.Skip("no llvm-mc")
	}
	type c struct {
		acc        bool
		d, n, m, i int
	}
	var cases []c
	for _, acc := range []bool{false, true} {
		for _, r := range [][3]int{{0, 0, 0}, {31, 31, 31}, {5, 10, 20}, {9, 14, 24}, {1, 2, 15}, {16, 17, 16}, {7, 30, 3}} {
			for i := 0; i < 4; i++ {
				cases = append(cases, c{acc, r[0], r[1], r[2], i})
			}
		}
	}
	var src strings.Builder
	for _, x := range cases {
		op := "umull"
		if x.acc {
			op = "umlal"
		}
		fmt.Fprintf(&src, "%s v%d.2d, v%d.2s, v%d.s[%d]\n", op, x.d, x.n, x.m, x.i)
	}
	cmd := exec.Command(mc, "-triple=aarch64", "-show-encoding")
	cmd.Stdin = strings.NewReader(src.String())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", mc, err, out)
	}
	enc := regexp.MustCompile(`encoding: \[0x(..),0x(..),0x(..),0x(..)\]`).FindAllStringSubmatch(string(out), -1)
	if len(enc) != len(cases) {
		t.Fatalf("llvm-mc gave %d encodings for %d instructions:\n%s", len(enc), len(cases), out)
	}
	for k, x := range cases {
		var b [4]byte
		for j := range b {
			fmt.Sscanf(enc[k][j+1], "%x", &b[j])
		}
		want := binary.LittleEndian.Uint32(b[:])
		if got := encodeMulElem(x.acc, x.d, x.n, x.m, x.i); got != want {
			t.Errorf("%+v: %#08x, llvm-mc %#08x", x, got, want)
		}
	}
}

// The generated kernel's WORDs decode, by the same field layout, to the
// instructions in their comments.
func TestGeneratedWords(t *testing.T) {
	asm := generate("x.s")
	re := regexp.MustCompile(`WORD \$0x([0-9a-f]{8}) // (UMULL|UMLAL) V(\d+)\.2D, V(\d+)\.2S, V(\d+)\.S\[(\d)\]`)
	n := 0
	for _, line := range bytes.Split(asm, []byte("\n")) {
		if !bytes.Contains(line, []byte("WORD")) {
			continue
		}
		m := re.FindSubmatch(line)
		if m == nil {
			t.Fatalf("unexpected WORD line %q", line)
		}
		var w uint32
		var d, nn, mm, i int
		fmt.Sscanf(string(m[1]), "%x", &w)
		fmt.Sscanf(string(m[3])+" "+string(m[4])+" "+string(m[5])+" "+string(m[6]), "%d %d %d %d", &d, &nn, &mm, &i)
		if got := encodeMulElem(string(m[2]) == "UMLAL", d, nn, mm, i); got != w {
			t.Errorf("%q: comment encodes to %#08x", line, got)
		}
		n++
	}
	// Quad step 100 multiplies, pair step 50, single step 25.
	if n != 175 {
		t.Errorf("%d multiplies, want 175", n)
	}
}
