package blockdev

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

// TestReadAheadStale reads chunks in order, so that the volume reads the
// next chunk's tuples ahead, then rewrites, discards or syncs that chunk
// before reading it: the tuples read ahead are stale and must not be used.
func TestReadAheadStale(t *testing.T) {
	for _, format := range []string{"512+8", "4096+16:crc64"} {
		for _, op := range []string{"write-sync", "discard", "write-nosync"} {
			t.Run(fmt.Sprintf("format=%s/op=%s", format, op), func(t *testing.T) {
				tv := newTestVol(t, format, 6*(1<<20)/dif16(format), CreateOptions{})
				v := tv.v
				cb := v.chunk * v.bs
				buf := make([]byte, cb)
				for k := 0; k < 5; k++ {
					if _, err := v.ReadAt(buf, int64(k*cb)); err != nil {
						t.Fatalf("chunk %d: %v", k, err)
					}
					if !bytes.Equal(buf, tv.model[k*cb:(k+1)*cb]) {
						t.Fatalf("chunk %d differs", k)
					}
					// Chunk k+1's tuples are being read ahead: change them.
					off := int64((k+1)*cb + 3*v.bs)
					switch op {
					case "write-sync", "write-nosync":
						tv.write(pattern(5*v.bs, uint64(k)+100), off)
						if op == "write-sync" {
							if err := v.Sync(); err != nil {
								t.Fatal(err)
							}
						}
					case "discard":
						if err := v.Discard(off, int64(5*v.bs)); err != nil {
							t.Fatal(err)
						}
						clear(tv.model[off : off+int64(5*v.bs)])
					}
				}
				if v.ra.tuples == nil {
					t.Fatal("no read-ahead happened")
				}
				tv.check()
			})
		}
	}
}

// dif16 is the block size of a format string's first field.
func dif16(format string) int {
	var bs int
	fmt.Sscanf(format, "%d", &bs)
	return bs
}

// TestReadAheadConcurrent runs sequential readers against a writer that
// syncs often: no read may fail verification.
func TestReadAheadConcurrent(t *testing.T) {
	tv := newTestVol(t, "512+8", 8*2048, CreateOptions{})
	v := tv.v
	cb := v.chunk * v.bs
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, cb)
			for k := r; ; k = (k + 1) % 8 {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := v.ReadAt(buf, int64(k*cb)); err != nil {
					errs <- fmt.Errorf("reader %d, chunk %d: %w", r, k, err)
					return
				}
			}
		}()
	}
	rng := rand.New(rand.NewPCG(1, 2))
	iters := 300
	if testing.Short() {
		iters = 60
	}
	for i := range iters {
		off := rng.Int64N(int64(8*cb - 4096))
		if _, err := v.WriteAt(pattern(1+rng.IntN(4096), uint64(i)), off); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			if err := v.Sync(); err != nil {
				t.Fatal(err)
			}
		}
		if i%50 == 7 {
			if err := v.Discard(int64(rng.IntN(8*2048-8))*512, 8*512); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
