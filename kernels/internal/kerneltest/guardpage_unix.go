//go:build unix

package kerneltest

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/unix"
)

// guardedBuffers returns a function that yields a slice of length n whose
// last byte is the last byte before a PROT_NONE page, so any over-read
// faults.
func guardedBuffer(t *testing.T) (get func(n int) []byte) {
	page := unix.Getpagesize()
	const span = 72 << 10
	size := (span/page+1)*page + page
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Skipf("mmap: %v", err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	guard := size - page
	if err := unix.Mprotect(mem[guard:], unix.PROT_NONE); err != nil {
		t.Skipf("mprotect: %v", err)
	}
	r := rand.New(rand.NewPCG(12, 13))
	for i := range mem[:guard] {
		mem[i] = byte(r.Uint32())
	}
	return func(n int) []byte { return mem[guard-n : guard : guard] }
}

func testGuardPage[T Word](t *testing.T, k Kernel[T]) {
	get := guardedBuffer(t)
	for n := 0; n <= 1100; n++ {
		p := get(n)
		if got, want := k.Update(k.start(), p), k.oracle(k.start(), p); got != want {
			t.Fatalf("len=%d at page end: %#x, oracle %#x", n, got, want)
		}
	}
	for _, n := range []int{4095, 4096, 4097, 8191, 65535, 65536} {
		p := get(n)
		if got, want := k.Update(k.start(), p), k.oracle(k.start(), p); got != want {
			t.Fatalf("len=%d at page end: %#x, oracle %#x", n, got, want)
		}
	}
	for _, c := range BlockCases {
		bl, st := c[0], c[1]
		if bl == 0 {
			continue
		}
		for _, nb := range []int{1, 2, 3, 4, 5, 8, 9, 16} {
			size := (nb-1)*st + bl
			if size > 70<<10 {
				continue
			}
			p := get(size)
			dst := make([]T, nb)
			if err := k.Blocks(dst, p, bl, st); err != nil {
				t.Fatal(err)
			}
			for i := range dst {
				if want := k.oracle(k.start(), p[i*st:i*st+bl]); dst[i] != want {
					t.Fatalf("block=%d stride=%d n=%d at page end: dst[%d] = %#x, oracle %#x", bl, st, nb, i, dst[i], want)
				}
			}
		}
	}
}

// BlocksCopy with q ending against a PROT_NONE page (an over-write
// faults), and p against another.
func testGuardPageCopy[T Word](t *testing.T, k Kernel[T]) {
	getP, getQ := guardedBuffer(t), guardedBuffer(t)
	for _, c := range BlockCases {
		bl, st := c[0], c[1]
		if bl == 0 {
			continue
		}
		for _, nb := range []int{1, 2, 3, 4, 5, 8, 9, 16} {
			size := (nb-1)*st + bl
			if size > 70<<10 {
				continue
			}
			p, q := getP(size), getQ(size)
			dst := make([]T, nb)
			if err := k.BlocksCopy(dst, q, p, bl, st); err != nil {
				t.Fatal(err)
			}
			for i := range dst {
				if want := k.oracle(k.start(), p[i*st:i*st+bl]); dst[i] != want {
					t.Fatalf("block=%d stride=%d n=%d at page end: dst[%d] = %#x, oracle %#x", bl, st, nb, i, dst[i], want)
				}
				if !bytes.Equal(q[i*st:i*st+bl], p[i*st:i*st+bl]) {
					t.Fatalf("block=%d stride=%d n=%d at page end: block %d of q differs", bl, st, nb, i)
				}
			}
		}
	}
}

// GuardedBuffer is guardedBuffer for the tests of kernel calls outside
// Kernel (crct10dif.BlocksCRC32C): get(n) ends against a PROT_NONE page.
func GuardedBuffer(t *testing.T) (get func(n int) []byte) { return guardedBuffer(t) }
