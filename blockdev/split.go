package blockdev

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Splitting a keyed computation over two CPUs.
//
// Poly1305 is most of the CPU time of a keyed read, write or protect, and a
// request's blocks are independent, so a second CPU can take part of them.
// The obvious way, a goroutine per half, does not work on the machines this
// was measured on (virtual machines with two vCPUs): a goroutine made
// runnable while the other CPU is idle starts 90-300 µs later (median 200
// µs, measured with a 300 µs job: most of the time it never ran before the
// spawning goroutine blocked), because the idle vCPU has to be woken by the
// hypervisor. A keyed read of 1 MiB takes 200-300 µs, so the "second half"
// ran after the first: a keyed read with the halves split so took 1.00-1.15
// times the time of one without (BenchmarkVolumeReadKeyed, -cpu 1,2).
//
// So the work is cut into pieces that both goroutines take in turn from a
// shared counter (splitWork): the caller starts at once and does every
// piece no helper took, so a helper that arrives late costs nothing, and
// the helper, after its last piece, stays awake for helperSpin, polling
// for the next request's pieces, which in a stream of requests (the
// sequential read of a scrub, a copy or an NBD client) are posted within
// a few microseconds. Then it exits; the next request starts another. The
// spin costs at most helperSpin of one CPU per request: bounded, and
// spent only while requests arrive closer than that.

// helperSpin is how long the helper polls for more pieces after its last.
const helperSpin = 250 * time.Microsecond

// splitJob is one call of splitWork: n pieces, fn(w, i) piece i run by
// worker w (0 the caller, 1 the helper).
type splitJob struct {
	n      int32
	fn     func(w, i int) bool
	next   atomic.Int32 // the next piece to take
	done   atomic.Int32 // the pieces finished or skipped
	failed atomic.Bool  // a piece returned false: the rest are skipped
}

// splitHelper is the one helper goroutine: job is the newest job posted
// (an older one is finished by its caller), alive is set while a helper
// goroutine runs. Only the goroutine that set alive (or the one started by
// the caller who set it) works, so there is at most one worker 1.
var splitHelper struct {
	job   atomic.Pointer[splitJob]
	alive atomic.Bool
	// started counts the helper goroutines started (for the tests).
	started atomic.Int64
}

// splitWork runs fn(w, i) for every piece i in [0, n), each exactly once,
// on the calling goroutine (w = 0) and, from whenever it takes a piece, a
// helper goroutine (w = 1); fn must be safe for two such calls at once
// with different w. A piece that returns false makes the pieces not yet
// started be skipped, and splitWork return false. It returns when every
// piece has finished; fn is not called after that. With GOMAXPROCS 1 or
// a single piece everything runs on the caller.
func splitWork(n int, fn func(w, i int) bool) bool {
	if n <= 1 || runtime.GOMAXPROCS(0) < 2 {
		for i := range n {
			if !fn(0, i) {
				return false
			}
		}
		return true
	}
	j := &splitJob{n: int32(n), fn: fn}
	splitHelper.job.Store(j)
	if !splitHelper.alive.Load() && splitHelper.alive.CompareAndSwap(false, true) {
		splitHelper.started.Add(1)
		go splitHelperLoop()
	}
	j.work(0)
	splitHelper.job.CompareAndSwap(j, nil)
	// The helper is in its last piece, if any: wait for it without
	// parking (a parked caller would be woken on the helper's CPU, and
	// share it with the helper while its own CPU sleeps).
	for j.done.Load() != j.n {
		runtime.Gosched()
	}
	return !j.failed.Load()
}

// work takes and runs pieces of j as worker w until there are none left.
func (j *splitJob) work(w int) {
	for {
		i := j.next.Add(1) - 1
		if i >= j.n {
			return
		}
		if !j.failed.Load() && !j.fn(w, int(i)) {
			j.failed.Store(true)
		}
		j.done.Add(1)
	}
}

// splitHelperLoop is the helper goroutine: it works on the posted jobs and
// polls for new ones until none came for helperSpin.
func splitHelperLoop() {
	for {
		idle := time.Now()
		for {
			if j := splitHelper.job.Load(); j != nil && j.next.Load() < j.n {
				j.work(1)
				idle = time.Now()
				continue
			}
			if time.Since(idle) >= helperSpin {
				break
			}
			runtime.Gosched()
		}
		splitHelper.alive.Store(false)
		// A job posted after the last look, whose caller saw alive still
		// set and started no helper: take it back, unless another
		// helper was started since.
		if j := splitHelper.job.Load(); j != nil && j.next.Load() < j.n && splitHelper.alive.CompareAndSwap(false, true) {
			continue
		}
		return
	}
}

// splitPiece is the bytes of a piece of keyed work, about: enough that a
// piece's fixed costs (a job's tag page lookups, a kernel call's set-up)
// do not count, small enough that the last piece, which one goroutine
// finishes while the other waits, is a small part of a request.
const splitPiece = 64 << 10

// splitMinBytes is the size from which keyedCompute and protectCompute
// cut their work in pieces: two pieces.
const splitMinBytes = 2 * splitPiece

// splitPieceBlocks is the blocks of a piece of splitPiece bytes of blocks
// of bs bytes: a multiple of twelve from 24 blocks on (the amd64 Poly1305
// kernels take blocks four or six at a time; see keyedReadData).
func splitPieceBlocks(bs int) int {
	n := max(1, splitPiece/bs)
	if n >= 24 {
		n -= n % 12
	}
	return n
}
