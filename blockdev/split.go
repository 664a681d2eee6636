package blockdev

import (
	"math"
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
// spent only while requests arrive closer than that. And when the second
// CPU does not help (busy with other work, or the helper descheduled in
// the middle of a piece), splitGate turns the split off for a while; so
// does a helper that finds itself descheduled between its polls
// (helperGap).

// helperSpin is how long the helper polls for more pieces after its last.
const helperSpin = 250 * time.Microsecond

// helperGap is the time between two of the helper's looks at the clock
// (spinCheck polls, a microsecond or two on a CPU of its own) from which
// it takes the other CPU to be busy: it was descheduled, or its P ran
// other goroutines, for that long. It then turns the split off
// (splitGate.close, the gate's backoff) and exits. The gate's balance
// alone missed this case: under contention the helper, sharing its CPU
// with another process, came back from a time slice away to find
// helperSpin over and exited, so the next request started another, and
// the jobs posted before a new helper runs do not count (splitGate). On
// the Sapphire Rapids guest with a spinner pinned to the other vCPU,
// 38-148 helper starts per 1,000 keyed reads of 1 MiB in 512-byte blocks
// kept the split on, and the reads ran at 48.4-55.6% of the unkeyed read
// against 61.8-63.4% with GOMAXPROCS 1 (three runs each, alternating).
// With the detector, 60.1-64.2% against 56.1-59.6% (three runs each,
// alternating, the same day). The other vCPU need not run anything of
// ours to be busy: on 6 December the hypervisor took vCPU 1 away for 1-5
// ms at a time, about half of its time in some minutes (a 2 s scratch
// loop reading the clock: 282 gaps of 1-5 ms and 8 longer on vCPU 1,
// against 7 of 1-5 ms on vCPU 0), when BenchmarkKeyed ran at half speed
// there and the split forced on took keyed reads of 512-byte blocks to
// 42.7-45.8% of the unkeyed read. Gaps of this size on a vCPU left alone
// are rarer (those 7 in 2 s): a false alarm costs splitBackoffMin of
// split, and does not escalate unless it recurs within splitSettled.
const helperGap = time.Millisecond

// testHookHelperPoll, if set, runs at each poll of the helper loop.
var testHookHelperPoll func()

// splitJob is one call of splitWork: n pieces, fn(w, i) piece i run by
// worker w (0 the caller, 1 the helper).
type splitJob struct {
	n      int32
	fn     func(w, i int) bool
	next   atomic.Int32 // the next piece to take
	done   atomic.Int32 // the pieces finished or skipped
	failed atomic.Bool  // a piece returned false: the rest are skipped
	// theirs is the helper's time from the start of its first piece to
	// the end of its last (so far), in ns.
	theirs atomic.Int64
}

// splitHelper is the one helper goroutine: job is the newest job posted
// (an older one is finished by its caller), alive is set while a helper
// goroutine runs. Only the goroutine that set alive (or the one started by
// the caller who set it) works, so there is at most one worker 1.
var splitHelper struct {
	job   atomic.Pointer[splitJob]
	alive atomic.Bool
	// awake is set while a helper goroutine runs its loop: from when it
	// first runs, not from when it is started.
	awake atomic.Bool
	// started counts the helper goroutines started (for the tests).
	started atomic.Int64
}

// splitWork runs fn(w, i) for every piece i in [0, n), each exactly once,
// on the calling goroutine (w = 0) and, from whenever it takes a piece, a
// helper goroutine (w = 1); fn must be safe for two such calls at once
// with different w. A piece that returns false makes the pieces not yet
// started be skipped, and splitWork return false. It returns when every
// piece has finished; fn is not called after that. With GOMAXPROCS 1, a
// single piece, or while the split does not pay (splitGate), everything
// runs on the caller.
func splitWork(n int, fn func(w, i int) bool) bool {
	if n <= 1 || runtime.GOMAXPROCS(0) < 2 || !splitGate.open() {
		for i := range n {
			if !fn(0, i) {
				return false
			}
		}
		return true
	}
	j := &splitJob{n: int32(n), fn: fn}
	t0 := time.Now()
	splitHelper.job.Store(j)
	if !splitHelper.alive.Load() && splitHelper.alive.CompareAndSwap(false, true) {
		splitHelper.started.Add(1)
		go splitHelperLoop()
	}
	awake := splitHelper.awake.Load()
	mine := j.work(0)
	t1 := time.Now()
	splitHelper.job.CompareAndSwap(j, nil)
	// The helper is in its last piece, if any: wait for it without
	// parking (a parked caller would be woken on the helper's CPU, and
	// share it with the helper while its own CPU sleeps). (Below n, not
	// unequal to it: a take that ran a piece twice, a bug, must not hang
	// the caller; TestSplitWorkContended reports it.)
	for j.done.Load() < j.n {
		runtime.Gosched()
	}
	if j.failed.Load() {
		// (Its pieces were skipped: its times say nothing of the split.)
		return false
	}
	if awake || mine < n {
		// (A job posted while the helper was still waking up, the first
		// of a stream or after a pause, says nothing of the split unless
		// the helper took a piece of it: see splitGate.)
		splitGate.record(n, mine, t1.Sub(t0), time.Duration(j.theirs.Load()), time.Since(t0))
	}
	return true
}

// work takes and runs pieces of j as worker w until there are none left,
// and returns how many it took.
func (j *splitJob) work(w int) int {
	took := 0
	var start time.Time
	for {
		i := j.next.Add(1) - 1
		if i >= j.n {
			return took
		}
		if took == 0 && w == 1 {
			start = time.Now()
		}
		took++
		if !j.failed.Load() && !j.fn(w, int(i)) {
			j.failed.Store(true)
		}
		if w == 1 {
			// (Before done: the caller reads it once every piece is.)
			j.theirs.Store(int64(time.Since(start)))
		}
		j.done.Add(1)
	}
}

// splitGate turns the split off while it does not pay: when the other CPU
// is busy with other work (another process, or the other goroutines of a
// program that keeps both CPUs busy), the helper gets a share of it at
// best, and a helper descheduled by the operating system in the middle of
// a piece holds the caller until it runs again, a time slice later
// (milliseconds). Measured on the two-vCPU guest with a spinner pinned to
// the other CPU: 17 such waits in 1,296 keyed reads of 1 MiB, 52 ms of
// their 445, and 512-byte reads ran at 24-32% of the unkeyed read's speed
// against 34-38% with the split off (the benchmark pinned to one CPU).
//
// So the gate keeps a balance of the time the split saved: each job adds
// what it saved, the time its pieces would have taken on one CPU (at the
// faster of the two workers' paces: a worker descheduled during its pieces
// is slow for a reason the other's pace does not share) less the time it
// took, which is negative when the helper held the caller. The balance is
// capped at splitCredit, so savings long past do not pay for a stall now;
// when it falls below zero, the split is off for a backoff, and starts
// again from a balance of splitRestart (a quarter of the credit: one slow
// job just after the split comes back on, a cold cache or a helper still
// waking, does not turn it off again at once, and a helper that stalls
// for a time slice does). Under contention the split saves a little on
// most jobs and loses a time slice on a few (the Sapphire Rapids guest,
// another process busy on the other vCPU: 168-443 helper starts and 9-18
// gate closings per 2,560 keyed reads of 1 MiB in 512-byte blocks under
// the rule before this one, which counted misses in a row and forgot them
// at a job that paid; those reads ran at 47.6-52.2% of the unkeyed read,
// against 58.6-59.2% with the split off). A balance sees both. The backoff
// starts at splitBackoffMin and doubles, up to splitBackoffMax, at each
// closing that comes within splitSettled of the split being turned on
// again; once the split has stayed on that long, the next closing starts
// from splitBackoffMin. Measured there under the same contention, with
// the masks' keystream kept: 0.4-2.3 closings per 1,000 reads and
// 46.1-67.6% of the unkeyed read at 512 bytes (mean 55.5%), against
// 4.7-5.9 closings and 46.1-61.0% (mean 52.4%) under the rule before (four
// runs each); idle, 72.0-81.3% against 67.0-82.5%.
//
// A job counts if the helper goroutine was running its loop when the job
// was posted, or if the helper took a piece of it. A job posted after the
// caller started the helper, and finished before the helper first ran
// (90-300 µs on the two-vCPU guests), says nothing of the split: its loss
// is gone once the helper runs. On the Zen 4 guest such jobs had made
// about half the misses of BenchmarkVolumeReadKeyed (whose unkeyed pass
// between the keyed ones lets the helper exit). But a helper that took a
// piece and held the caller did cost that time, and would again: on the
// Sapphire Rapids guest, while the hypervisor took vCPU 1 away for 1-5 ms
// at a time (282 such gaps in 2 s of a clock-reading loop there, 7 on vCPU
// 0), the helper's gap detector (helperGap) ended it, the next job started
// it again, and the rule before this one, which counted only jobs posted
// to a running helper, never saw the late ones: 42-54 helper starts per
// 1,000 keyed reads of 1 MiB in 512-byte blocks and 57.4-60.2% of the
// unkeyed read, against 1.6-2.0 starts and 65.2-66.5% with them counted
// (three runs each; with a spinner on the other vCPU, 54.1-58.2% against
// 60.5-62.2%). With vCPU 1 healthy the two rules measured the same idle,
// 66.1-71.5% and 68.4-72.2%, and busy 50.5-57.2% against 62.2-63.0%.
//
// Garbage collections stall the helper too (its Gosched lets the
// collector's fractional worker take its P): short losses, which the
// credit absorbs. Concurrent callers on both CPUs save nothing (only the
// newest job is helped) and lose a little each, which turns the split off
// in time, which is right: the CPUs are busy.
var splitGate gate

const (
	splitCredit     = time.Millisecond
	splitRestart    = splitCredit / 4
	splitBackoffMin = 10 * time.Millisecond
	splitBackoffMax = time.Second
	splitSettled    = time.Second
)

type gate struct {
	until   atomic.Int64 // time.Now().UnixNano() before which the split is off
	backoff atomic.Int64 // the last backoff
	balance atomic.Int64 // the time saved, in ns, since the split was turned on; at most splitCredit
	// offs counts the times the split was turned off (for the tests).
	offs atomic.Int64
	// forced keeps the split on (for the tests of splitWork itself).
	forced atomic.Bool
}

// open reports whether the split is on.
func (g *gate) open() bool {
	if g.forced.Load() {
		return true
	}
	u := g.until.Load()
	return u == 0 || time.Now().UnixNano() >= u
}

// record notes a job of n pieces whose caller ran mine of them in own, the
// helper the others in theirs, and which took total in all.
func (g *gate) record(n, mine int, own, theirs, total time.Duration) {
	per := time.Duration(math.MaxInt64)
	if mine > 0 {
		per = own / time.Duration(mine)
	}
	if mine < n {
		per = min(per, theirs/time.Duration(n-mine))
	}
	saved := int64(per)*int64(n) - int64(total)
	for {
		b := g.balance.Load()
		nb := min(b+saved, int64(splitCredit))
		if nb >= 0 {
			if g.balance.CompareAndSwap(b, nb) {
				return
			}
			continue
		}
		if g.balance.CompareAndSwap(b, 0) {
			break
		}
	}
	g.close()
}

// close turns the split off for a backoff (see splitGate); the balance
// starts again from splitRestart when it comes back on.
func (g *gate) close() {
	g.balance.Store(int64(splitRestart))
	now := time.Now().UnixNano()
	if now < g.until.Load() {
		// Already off: a helper still in its loop when the split went
		// off (a gap in its last polls) does not add a backoff.
		return
	}
	b := time.Duration(g.backoff.Load())
	if on := g.until.Load(); on == 0 || now-on >= int64(splitSettled) {
		b = 0
	}
	b = min(max(2*b, splitBackoffMin), splitBackoffMax)
	g.backoff.Store(int64(b))
	g.until.Store(now + int64(b))
	g.offs.Add(1)
}

// reset turns the split on and forgets the balance and backoff (for the
// tests).
func (g *gate) reset() {
	g.until.Store(0)
	g.backoff.Store(0)
	g.balance.Store(0)
}

// splitHelperLoop is the helper goroutine: it works on the posted jobs and
// polls for new ones until none came for helperSpin.
func splitHelperLoop() {
	splitHelper.awake.Store(true)
	for {
		idle := time.Now()
		last := idle // the clock's last reading
		// The clock is read every spinCheck polls: reading it at each
		// took 1% of a keyed read's CPU time.
		const spinCheck = 16
		for polls := 1; ; polls++ {
			if testHookHelperPoll != nil {
				testHookHelperPoll()
			}
			if j := splitHelper.job.Load(); j != nil && j.next.Load() < j.n {
				j.work(1)
				idle, polls = time.Now(), 0
				last = idle
				continue
			}
			if polls%spinCheck == 0 {
				now := time.Now()
				if now.Sub(last) >= helperGap {
					// Descheduled between two looks: the CPU it runs
					// on is busy with other work (see helperGap).
					splitGate.close()
					break
				}
				last = now
				if now.Sub(idle) >= helperSpin || !splitGate.open() {
					break
				}
			}
			runtime.Gosched()
		}
		splitHelper.awake.Store(false)
		splitHelper.alive.Store(false)
		// A job posted after the last look, whose caller saw alive still
		// set and started no helper: take it back, unless another
		// helper was started since.
		if j := splitHelper.job.Load(); j != nil && j.next.Load() < j.n && splitHelper.alive.CompareAndSwap(false, true) {
			splitHelper.awake.Store(true)
			continue
		}
		return
	}
}

// splitPiece is the bytes of a piece of keyed work, about: enough that a
// piece's fixed costs (its tag page lookups, its tuple checks and mapped
// read, a kernel call's set-up and AES-CTR stream) do not count, the last
// pieces of a request being smaller (blockPieces). On the Zen 3 guest,
// keyed reads of 1 MiB in 512-byte blocks ran at 57.6-61.8% of the
// unkeyed read with pieces of 64 KiB throughout and 60.6-64.5% with these
// (BenchmarkVolumeReadKeyed, 5120x, four runs each, alternating).
const splitPiece = 128 << 10

// splitMinBytes is the size from which keyedCompute and protectCompute
// cut their work in pieces.
const splitMinBytes = 128 << 10

// splitPieceBlocks is the blocks of a piece of splitPiece bytes of blocks
// of bs bytes: a multiple of kernelGroup from that many blocks on
// (kernelBlocks).
func splitPieceBlocks(bs int) int {
	return kernelBlocks(splitPiece / bs)
}

// kernelGroup is the blocks the amd64 Poly1305 kernels take at a time, in
// all their forms: four (avx2, avx2r8), six (hybrid, hybrid8) or eight
// (avx512ifma); the blocks left over from a call take a slower one. With
// pieces of a multiple of twelve, as at first, every 512-byte piece left
// four blocks to the AVX2 kernel under avx512ifma, a tenth of the
// kernels' time in a keyed read on the Zen 4 build machine (CPU profile).
const kernelGroup = 24

// kernelBlocks rounds a piece of n blocks down to a multiple of
// kernelGroup from that many blocks on, and up to one block.
func kernelBlocks(n int) int {
	n = max(1, n)
	if n >= kernelGroup {
		n -= n % kernelGroup
	}
	return n
}

// blockPieces cuts n blocks into the pieces of a splitWork call: pieces
// of per blocks (splitPieceBlocks), then the last two to three pieces' worth of
// blocks in pieces of a quarter of that (at least a block, rounded by
// kernelBlocks). The last piece is the one a goroutine finishes while
// the other waits or idles, so the smaller the last pieces the less of a
// request runs on one CPU, while small pieces throughout would multiply a
// piece's fixed costs.
type blockPieces struct {
	n, per, tail int // blocks, the head's piece size, the tail's
	head         int // the head's pieces: blocks [0, head*per)
	pieces       int
}

func newBlockPieces(n, bs int) blockPieces {
	per := splitPieceBlocks(bs)
	tail := min(per, kernelBlocks(splitPiece/4/bs))
	head := max(0, n-2*per) / per
	rest := n - head*per
	return blockPieces{n: n, per: per, tail: tail, head: head, pieces: head + (rest+tail-1)/tail}
}

// at returns the blocks [i, j) of piece p.
func (b blockPieces) at(p int) (i, j int) {
	if p < b.head {
		return p * b.per, (p + 1) * b.per
	}
	i = b.head*b.per + (p-b.head)*b.tail
	return i, min(b.n, i+b.tail)
}

// splitBlocks runs fn over the pieces of n blocks of bs bytes
// (blockPieces) with splitWork: fn(w, i, j) is worker w's piece of blocks
// [i, j).
func splitBlocks(n, bs int, fn func(w, i, j int) bool) bool {
	bp := newBlockPieces(n, bs)
	return splitWork(bp.pieces, func(w, p int) bool {
		i, j := bp.at(p)
		return fn(w, i, j)
	})
}
