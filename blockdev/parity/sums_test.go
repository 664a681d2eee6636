package parity

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/store"
)

func TestSumPageRoundTrip(t *testing.T) {
	// 2500 stripes: pages 0 and 1 full, page 2 holds 452.
	l := mustLayout(t, Options{Data: 4, Parity: 3, BlockSize: 512, Blocks: 10000, Depth: Consecutive})
	if l.Stripes() != 2500 || l.SumPages() != 3 || SumPageOf(2499) != 2 || SumPageOf(1023) != 0 || SumPageOf(1024) != 1 {
		t.Fatalf("%v: %d pages", l, l.SumPages())
	}
	r := rand.New(rand.NewPCG(1, 1))
	for page := range l.SumPages() {
		p := l.NewSumPage(page)
		first := page * SumPageStripes
		last := min(first+SumPageStripes, l.Stripes()) - 1
		want := map[int64][]uint32{}
		for _, s := range []int64{first, first + 1, first + 63, first + 64, last} {
			sums := []uint32{r.Uint32(), r.Uint32(), 0}
			p.Set(s, sums)
			want[s] = sums
		}
		p.Set(first+5, []uint32{1, 2, 3})
		p.Unset(first + 5)
		b := p.Encode(nil)
		if len(b) != p.EncodedLen() || len(b) != 16+128+1024*3*4+4 {
			t.Fatalf("page %d: %d bytes", page, len(b))
		}
		q := l.NewSumPage(page)
		if err := q.Decode(b); err != nil {
			t.Fatal(err)
		}
		if q.Recorded() != len(want) {
			t.Fatalf("page %d: %d stripes recorded, want %d", page, q.Recorded(), len(want))
		}
		for s := first; s <= last; s++ {
			got, ok := q.Stripe(s)
			if w, set := want[s]; ok != set || ok && !equalSums(got, w) {
				t.Fatalf("page %d stripe %d: %v %v, want %v %v", page, s, got, ok, w, set)
			}
		}
		if !bytes.Equal(q.Encode(nil), b) {
			t.Fatalf("page %d: encode(decode(b)) != b", page)
		}
	}
}

func equalSums(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestSumPageDecodeRefuses: every byte changed, a record of another page
// or another m, a truncated record, and a stripe recorded past the
// volume's end (with a good CRC) are each refused, as store corruption,
// and leave the page as it was.
func TestSumPageDecodeRefuses(t *testing.T) {
	l := mustLayout(t, Options{Data: 4, Parity: 2, BlockSize: 512, Blocks: 4 * 1500, Depth: Consecutive})
	p := l.NewSumPage(1) // stripes 1024..1499
	p.Set(1030, []uint32{7, 8})
	good := p.Encode(nil)
	q := l.NewSumPage(1)
	q.Set(1024, []uint32{1, 1})
	before := q.Encode(nil)
	refuse := func(name string, b []byte) {
		t.Helper()
		err := q.Decode(b)
		var ce *CorruptSumsError
		if !errors.Is(err, store.ErrCorrupt) || !errors.As(err, &ce) || ce.Page != 1 {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(q.Encode(nil), before) {
			t.Fatalf("%s: a refused Decode changed the page", name)
		}
	}
	for i := range good {
		b := bytes.Clone(good)
		b[i] ^= 0x10
		refuse("flip", b)
	}
	refuse("short", good[:len(good)-1])
	refuse("long", append(bytes.Clone(good), 0))
	refuse("empty", nil)
	reCRC := func(b []byte) []byte {
		return binary.BigEndian.AppendUint32(b[:len(b)-4], crc32c.Checksum(b[:len(b)-4]))
	}
	other := l.NewSumPage(0).Encode(nil)
	refuse("page 0", other)
	b := bytes.Clone(good)
	b[0] = 'P'
	refuse("magic", reCRC(b))
	b = bytes.Clone(good)
	b[1] = 2
	refuse("version", reCRC(b))
	b = bytes.Clone(good)
	b[6] = 0 // 1024 → 0
	refuse("stripes a page", reCRC(b))
	b = bytes.Clone(good)
	b[16+(1500-1024)/8] |= 1 << ((1500 - 1024) % 8) // stripe 1500, past the end
	refuse("past the end", reCRC(b))
	m3 := mustLayout(t, Options{Data: 4, Parity: 3, BlockSize: 512, Blocks: 4 * 1500, Depth: Consecutive}).NewSumPage(1)
	if err := m3.Decode(good); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("m=3 decoding m=2: %v", err)
	}
	if err := q.Decode(good); err != nil {
		t.Fatal(err)
	}
}

func TestSumPagePanics(t *testing.T) {
	l := mustLayout(t, Options{Data: 4, Parity: 2, BlockSize: 512, Blocks: 4 * 1500, Depth: Consecutive})
	p := l.NewSumPage(1)
	for name, f := range map[string]func(){
		"Stripe(1023)": func() { p.Stripe(1023) },
		"Stripe(1500)": func() { p.Stripe(1500) },
		"Set(1024, 3)": func() { p.Set(1024, []uint32{1, 2, 3}) },
		"Unset(2048)":  func() { p.Unset(2048) },
		"page -1":      func() { l.NewSumPage(-1) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		}()
	}
}

// FuzzSumPageDecode: Decode never panics, and what it accepts encodes back
// to the same bytes.
func FuzzSumPageDecode(f *testing.F) {
	l := mustLayout(f, Options{Data: 4, Parity: 2, BlockSize: 512, Blocks: 4 * 1500, Depth: Consecutive})
	p := l.NewSumPage(1)
	f.Add(p.Encode(nil))
	p.Set(1100, []uint32{1, 2})
	f.Add(p.Encode(nil))
	f.Add([]byte{'R', 1, 2, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		q := l.NewSumPage(1)
		if len(b) > 8 && len(b) == q.EncodedLen() && b[0] == 'R' {
			// Give the fuzzer records with a good CRC to get past it.
			b = binary.BigEndian.AppendUint32(b[:len(b)-4:len(b)-4], crc32c.Checksum(b[:len(b)-4]))
		}
		if err := q.Decode(b); err != nil {
			if !errors.Is(err, store.ErrCorrupt) {
				t.Fatal(err)
			}
			return
		}
		if got := q.Encode(nil); !bytes.Equal(got, b) {
			// Only the sums of unrecorded stripes may differ: Encode
			// writes what Decode read, so none.
			t.Fatalf("re-encoded record differs")
		}
	})
}
