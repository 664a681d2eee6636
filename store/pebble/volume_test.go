package pebble_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/difctl/difctl/store"
)

// volumeState is what ReadRange reports of a whole volume: the oracle of
// these tests is what the store read back before it was damaged or
// crashed (the tuple semantics are store's tests').
type volumeState struct {
	tuples  []byte
	sums    []uint32 // nil if the volume keeps none
	written store.Bitmap
}

// readVolume reads every block of tp.
func readVolume(tp *store.Tuples) (volumeState, error) {
	m := tp.Manifest()
	n := int(m.Blocks())
	s := volumeState{tuples: make([]byte, n*tp.TupleSize()), written: store.NewBitmap(n)}
	if m.SectorSums {
		s.sums = make([]uint32, n)
	}
	_, err := tp.ReadRange(0, s.tuples, s.sums, s.written)
	return s, err
}

func (s volumeState) equal(o volumeState) bool {
	return bytes.Equal(s.tuples, o.tuples) && slices.Equal(s.sums, o.sums) && slices.Equal(s.written, o.written)
}

// randomTuples returns n tuples of size bytes and n sector sums, the same
// for the same seed.
func randomTuples(seed uint64, n, size int) ([]byte, []uint32) {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	c := rand.NewChaCha8(key)
	tuples := make([]byte, n*size)
	c.Read(tuples)
	sums := make([]uint32, n)
	for i := range sums {
		sums[i] = uint32(c.Uint64())
	}
	return tuples, sums
}

// digest hashes every key and value of kv, in order.
func digest(t *testing.T, kv store.KV) [sha256.Size]byte {
	t.Helper()
	it, err := kv.NewIter(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	h := sha256.New()
	for it.Next() {
		for _, b := range [][]byte{it.Key(), it.Value()} {
			h.Write(binary.AppendUvarint(nil, uint64(len(b))))
			h.Write(b)
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return [sha256.Size]byte(h.Sum(nil))
}
