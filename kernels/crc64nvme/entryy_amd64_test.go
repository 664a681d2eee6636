//go:build !purego

package crc64nvme

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/difctl/difctl/kernels/internal/impl"
)

// TestEntryTargetY checks that updateEntry's jump to the AVX2 tier's
// kernel (updateEntryY) is live under avx2 where the CPU has its features,
// and under no other implementation: the dispatch variable then holds the
// same function value as entryTargetY, which updateEntry compares word for
// word. Update and Checksum under avx2 are then checked against the
// portable code at every length the kernel takes and past it, from
// several registers and alignments.
func TestEntryTargetY(t *testing.T) {
	if !hasFoldAVX2 {
		if entryTargetY != nil {
			t.Fatal("entryTargetY is set on a CPU without the kernel's features")
		}
		t.Skip("the CPU lacks AVX2 or VPCLMULQDQ")
	}
	word := func(f *func(uint64, []byte) uint64) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(f)) }
	defer impl.Reset(pkgName)
	for _, name := range impl.List(pkgName) {
		if !name.Available {
			continue
		}
		if err := impl.Select(pkgName, name.Name); err != nil {
			t.Fatal(err)
		}
		if got := word(&update) == word(&entryTargetY); got != (name.Name == "avx2") {
			t.Errorf("impl=%s: update is entryTargetY's word: %v", name.Name, got)
		}
	}
	if err := impl.Select(pkgName, "avx2"); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 1100+64)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	n := 1100
	if testing.Short() {
		n = 1040
	}
	for size := 0; size <= n; size++ {
		off := size % 64
		p := buf[off : off+size]
		crc := uint64(r.Uint64())
		if got, want := Update(crc, p), updateGeneric(crc, p); got != want {
			t.Fatalf("size=%d align=%d: Update %#x, want %#x", size, off, got, want)
		}
		if got, want := Checksum(p), updateGeneric(0, p); got != want {
			t.Fatalf("size=%d align=%d: Checksum %#x, want %#x", size, off, got, want)
		}
	}
}
