package blockdev

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"testing"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/faultdev"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/blockdev/internal/split"
	"github.com/difctl/difctl/dif"
)

// Large reads (unless Options.VerifyWorkers is negative) are cut into
// pieces that the caller and the split helper read and verify
// (readParallel). Every piece
// must be verified, failures in any piece reported at the right block, and
// a piece whose device read fails redone serially with the per-block
// retries.
func TestVolumeSplitRead(t *testing.T) {
	const blocks = 512 // 2 MiB of 4 KiB blocks: a read of all of it is split
	for _, workers := range []int{-1, 0, 1, 3} {
		for _, c := range []string{"clean", "transient-io", "permanent-io", "corrupt"} {
			t.Run(fmt.Sprintf("workers=%d/case=%s", workers, c), func(t *testing.T) {
				tv := newTestVol(t, "4096+8", blocks, CreateOptions{Options: Options{VerifyWorkers: workers}})
				if got, want := tv.v.splitRead(tv.v.chunk), workers >= 0 && runtime.GOMAXPROCS(0) > 1; got != want {
					t.Fatalf("splitRead(%d blocks) = %v with %d workers, want %v", tv.v.chunk, got, workers, want)
				}
				bad := int64(blocks*3/4 + 5) // in the last part whatever the split
				switch c {
				case "transient-io":
					tv.fault.Inject(faultdev.Fault{Kind: faultdev.FailRead, Off: bad * 4096, Len: 1, Times: 1})
				case "permanent-io":
					tv.fault.Inject(faultdev.Fault{Kind: faultdev.FailRead, Off: bad * 4096, Len: 1})
				case "corrupt":
					tv.fault.FlipBit(bad*4096+100, 3)
				}
				buf := make([]byte, blocks*4096)
				n, err := tv.v.ReadAt(buf, 0)
				switch c {
				case "clean", "transient-io":
					if err != nil || n != len(buf) || !bytes.Equal(buf, tv.model) {
						t.Fatalf("ReadAt = %d, %v (data equal: %v)", n, err, bytes.Equal(buf, tv.model))
					}
				case "permanent-io":
					var ioe *device.IOError
					if !errors.As(err, &ioe) || n != int(bad)*4096 || !bytes.Equal(buf[:n], tv.model[:n]) {
						t.Fatalf("ReadAt = %d, %v; want %d bytes and an *IOError", n, err, bad*4096)
					}
				case "corrupt":
					var ie *IntegrityError
					if !errors.As(err, &ie) || !errors.Is(err, dif.ErrIntegrity) || ie.LBA != bad || n != int(bad)*4096 {
						t.Fatalf("ReadAt = %d, %v; want an integrity error at block %d", n, err, bad)
					}
				}
			})
		}
	}
}

// A read split with the helper allocates no more than a serial one, the
// split's job and now and then a helper goroutine: the pieces and mapped
// reads of both goroutines run through callbacks made once per scratch.
func TestVolumeSplitReadAllocs(t *testing.T) {
	blocktest.SkipNoMmap(t)
	if blocktest.RaceEnabled {
		t.Skip("allocation counts under the race detector are not meaningful")
	}
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("a split needs two CPUs")
	}
	t.Cleanup(split.Force())
	var allocs [2]float64
	for i, workers := range []int{-1, 0} {
		v, _, _ := fileVol(t, "4096+8", 512, Options{VerifyWorkers: workers})
		buf := make([]byte, 256*4096)
		if v.splitRead(256) != (workers >= 0) {
			t.Fatalf("workers=%d: splitRead = %v", workers, !(workers >= 0))
		}
		// (testing.AllocsPerRun runs with GOMAXPROCS 1, which turns the
		// split off. The first read wakes the helper, which stays for a
		// moment after a request.)
		const runs = 50
		_, _ = v.ReadAt(buf, 4096)
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		for range runs {
			if _, err := v.ReadAt(buf, 4096); err != nil {
				t.Fatal(err)
			}
		}
		runtime.ReadMemStats(&m1)
		allocs[i] = float64(m1.Mallocs-m0.Mallocs) / runs
	}
	if allocs[1] > allocs[0]+2 {
		t.Errorf("%v allocations per split read, %v per serial one", allocs[1], allocs[0])
	}
}

// TestVolumeSplitReadGateClosed: while the split's gate is closed (the
// other CPU busy), a large read takes the serial path, which reads and
// classifies the run in fewer calls, rather than running the pieces one
// after the other on the caller; with the split on it shares the pieces
// (Stats.SplitRuns). Both return the image's bytes.
func TestVolumeSplitReadGateClosed(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("a split needs two CPUs")
	}
	v, _, model := fileVol(t, "512+8", 4096, Options{})
	buf := make([]byte, 1<<20)
	read := func() {
		t.Helper()
		if _, err := v.ReadAt(buf, 512); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf, model[512:512+len(buf)]) {
			t.Fatal("a large read returned other bytes than the image's")
		}
	}
	hold := split.Hold()
	before := v.Stats().SplitRuns
	read()
	if got := v.Stats().SplitRuns; got != before {
		t.Errorf("with the split held off, %d runs were read in pieces", got-before)
	}
	hold()
	t.Cleanup(split.Force())
	read()
	if got := v.Stats().SplitRuns; got != before+1 {
		t.Errorf("with the split on, %d runs were read in pieces, want 1", got-before)
	}
}
