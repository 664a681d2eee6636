package emu

import "math/rand/v2"

// Random returns n bytes of r, one r.Uint32() a byte: the messages of the
// emulator tests, reproducible from r's seed.
func Random(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// PutArgs stores args as the frame's first quadwords, args[i] at offset 8i
// (Put64): a function's arguments in the order of its signature.
func (m *Machine) PutArgs(args ...uint64) {
	for i, a := range args {
		m.Put64(8*i, a)
	}
}
