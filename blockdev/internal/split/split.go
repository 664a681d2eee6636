// Package split runs a computation over two CPUs: the caller's goroutine
// and one helper goroutine take the pieces of a job in turn from a shared
// counter (Work), and a gate turns the split off while it does not pay.
// blockdev's keyed reads, writes and protects cut their Poly1305 work so
// (Blocks, Pieces): the blocks of a request are independent, and Poly1305
// is most of their CPU time. Large verified reads with
// Options.VerifyWorkers cut their reading and verifying so too.
//
// Why pieces and a waiting helper rather than a goroutine per half: on a
// virtual machine with two vCPUs, a goroutine made runnable while the
// other CPU is idle starts hundreds of microseconds later, because the
// idle vCPU has to be woken by the hypervisor; that is about the time of a
// whole keyed read of 1 MiB, so the "second half" would run after the
// first. Taking pieces from a shared counter, the caller starts at once and
// does every piece no helper took, so a helper that arrives late costs
// nothing; and the helper, after its last piece, stays awake for
// helperSpin, polling for the next request's pieces, which in a stream of
// requests (the sequential read of a scrub, a copy or an NBD client) are
// posted within a few microseconds. Then it exits; the next request starts
// another. The spin costs at most helperSpin of one CPU per request:
// bounded, and spent only while requests arrive closer than that. When the
// second CPU does not help (busy with other work, or the helper
// descheduled in the middle of a piece), the gate turns the split off for
// a while; so does a helper that finds itself descheduled between its
// polls (helperGap).
//
// The measurements behind the constants and rules here are in
// docs/perf/split-gate.md.
package split

import (
	"math"
	"runtime"
	"sync/atomic"
	"time"
)

// helperSpin is how long the helper polls for more pieces after its last:
// longer than the gap between the requests of a stream, short enough that
// the CPU it spends per request stays small beside the request's work.
const helperSpin = 250 * time.Microsecond

// helperGap is the time between two of the helper's looks at the clock
// (spinCheck polls, a microsecond or two on a CPU of its own) from which
// it takes the other CPU to be busy: it was descheduled, or its P ran
// other goroutines, for that long. It then turns the split off
// (gate.close, the gate's backoff) and exits. The gate's balance alone
// misses this case: under contention the helper, sharing its CPU with
// another process, comes back from a time slice away to find helperSpin
// over and exits, so the next request starts another, and the jobs posted
// before a new helper runs do not count (gate). The other vCPU need not
// run anything of ours to be busy: a hypervisor may take it away for
// milliseconds at a time. Gaps of this size on a vCPU left alone are
// rare: a false alarm costs backoffMin of split, and does not escalate
// unless it recurs within settled.
const helperGap = time.Millisecond

// testHookHelperPoll, if set, runs at each poll of the helper loop.
var testHookHelperPoll func()

// job is one call of Work: n pieces, fn(w, i) piece i run by worker w (0
// the caller, 1 the helper).
type job struct {
	n      int32
	fn     func(w, i int) bool
	next   atomic.Int32 // the next piece to take
	done   atomic.Int32 // the pieces finished or skipped
	failed atomic.Bool  // a piece returned false: the rest are skipped
	// theirs is the helper's time from the start of its first piece to
	// the end of its last (so far), in ns.
	theirs atomic.Int64
}

// helper is the one helper goroutine: job is the newest job posted (an
// older one is finished by its caller), alive is set while a helper
// goroutine runs. Only the goroutine that set alive (or the one started by
// the caller who set it) works, so there is at most one worker 1.
var helper struct {
	job   atomic.Pointer[job]
	alive atomic.Bool
	// awake is set while a helper goroutine runs its loop: from when it
	// first runs, not from when it is started.
	awake atomic.Bool
	// started counts the helper goroutines started (for the tests).
	started atomic.Int64
}

// Work runs fn(w, i) for every piece i in [0, n), each exactly once, on
// the calling goroutine (w = 0) and, from whenever it takes a piece, a
// helper goroutine (w = 1); fn must be safe for two such calls at once
// with different w. A piece that returns false makes the pieces not yet
// started be skipped, and Work return false. It returns when every piece
// has finished; fn is not called after that. With GOMAXPROCS 1, a single
// piece, or while the split does not pay (gate), everything runs on the
// caller.
func Work(n int, fn func(w, i int) bool) bool {
	if n <= 1 || runtime.GOMAXPROCS(0) < 2 || !gate.open() {
		for i := range n {
			if !fn(0, i) {
				return false
			}
		}
		return true
	}
	j := &job{n: int32(n), fn: fn}
	t0 := time.Now()
	helper.job.Store(j)
	if !helper.alive.Load() && helper.alive.CompareAndSwap(false, true) {
		helper.started.Add(1)
		go helperLoop()
	}
	awake := helper.awake.Load()
	mine := j.work(0)
	t1 := time.Now()
	helper.job.CompareAndSwap(j, nil)
	// The helper is in its last piece, if any: wait for it without
	// parking (a parked caller would be woken on the helper's CPU, and
	// share it with the helper while its own CPU sleeps). (Below n, not
	// unequal to it: a take that ran a piece twice, a bug, must not hang
	// the caller; TestWorkContended reports it.)
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
		// the helper took a piece of it: see gate.)
		gate.record(n, mine, t1.Sub(t0), time.Duration(j.theirs.Load()), time.Since(t0))
	}
	return true
}

// work takes and runs pieces of j as worker w until there are none left,
// and returns how many it took.
func (j *job) work(w int) int {
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

// gate turns the split off while it does not pay: when the other CPU is
// busy with other work (another process, or the other goroutines of a
// program that keeps both CPUs busy), the helper gets a share of it at
// best, and a helper descheduled by the operating system in the middle of
// a piece holds the caller until it runs again, a time slice later
// (milliseconds): then a split request is slower than one on one CPU.
//
// So the gate keeps a balance of the time the split saved: each job adds
// what it saved, the time its pieces would have taken on one CPU (at the
// faster of the two workers' paces: a worker descheduled during its pieces
// is slow for a reason the other's pace does not share) less the time it
// took, which is negative when the helper held the caller. The balance is
// capped at credit, so savings long past do not pay for a stall now; when
// it falls below zero, the split is off for a backoff, and starts again
// from a balance of restart (a quarter of the credit: one slow job just
// after the split comes back on, a cold cache or a helper still waking,
// does not turn it off again at once, and a helper that stalls for a time
// slice does). Under contention the split saves a little on most jobs and
// loses a time slice on a few; a balance sees both, where a count of
// misses in a row, forgotten at a job that paid, does not. The backoff
// starts at backoffMin and doubles, up to backoffMax, at each closing that
// comes within settled of the split being turned on again; once the split
// has stayed on that long, the next closing starts from backoffMin.
//
// A job counts if the helper goroutine was running its loop when the job
// was posted, or if the helper took a piece of it. A job posted after the
// caller started the helper, and finished before the helper first ran,
// says nothing of the split: its loss is gone once the helper runs. But a
// helper that took a piece and held the caller did cost that time, and
// would again (a helper on a vCPU the hypervisor takes away, ended by its
// gap detector and started again by the next job): such jobs count.
//
// Garbage collections stall the helper too (its Gosched lets the
// collector's fractional worker take its P): short losses, which the
// credit absorbs. Concurrent callers on both CPUs save nothing (only the
// newest job is helped) and lose a little each, which turns the split off
// in time, which is right: the CPUs are busy.
var gate gateState

const (
	credit     = time.Millisecond
	restart    = credit / 4
	backoffMin = 10 * time.Millisecond
	backoffMax = time.Second
	settled    = time.Second
)

type gateState struct {
	until   atomic.Int64 // time.Now().UnixNano() before which the split is off
	backoff atomic.Int64 // the last backoff
	balance atomic.Int64 // the time saved, in ns, since the split was turned on; at most credit
	// offs counts the times the split was turned off (for the tests).
	offs atomic.Int64
	// forced keeps the split on (for the tests of Work itself).
	forced atomic.Bool
	// held keeps the split off (Hold, for the tests of users' serial
	// paths); forced wins.
	held atomic.Bool
}

// open reports whether the split is on.
func (g *gateState) open() bool {
	if g.forced.Load() {
		return true
	}
	if g.held.Load() {
		return false
	}
	u := g.until.Load()
	return u == 0 || time.Now().UnixNano() >= u
}

// record notes a job of n pieces whose caller ran mine of them in own, the
// helper the others in theirs, and which took total in all.
func (g *gateState) record(n, mine int, own, theirs, total time.Duration) {
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
		nb := min(b+saved, int64(credit))
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

// close turns the split off for a backoff (see gate); the balance starts
// again from restart when it comes back on.
func (g *gateState) close() {
	g.balance.Store(int64(restart))
	now := time.Now().UnixNano()
	if now < g.until.Load() {
		// Already off: a helper still in its loop when the split went
		// off (a gap in its last polls) does not add a backoff.
		return
	}
	b := time.Duration(g.backoff.Load())
	if on := g.until.Load(); on == 0 || now-on >= int64(settled) {
		b = 0
	}
	b = min(max(2*b, backoffMin), backoffMax)
	g.backoff.Store(int64(b))
	g.until.Store(now + int64(b))
	g.offs.Add(1)
}

// reset turns the split on and forgets the balance and backoff (for the
// tests).
func (g *gateState) reset() {
	g.until.Store(0)
	g.backoff.Store(0)
	g.balance.Store(0)
}

// helperLoop is the helper goroutine: it works on the posted jobs and
// polls for new ones until none came for helperSpin.
func helperLoop() {
	helper.awake.Store(true)
	for {
		idle := time.Now()
		last := idle // the clock's last reading
		// The clock is read every spinCheck polls: reading it at each
		// poll costs a measurable share of a keyed read's CPU time.
		const spinCheck = 16
		for polls := 1; ; polls++ {
			if testHookHelperPoll != nil {
				testHookHelperPoll()
			}
			if j := helper.job.Load(); j != nil && j.next.Load() < j.n {
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
					gate.close()
					break
				}
				last = now
				if now.Sub(idle) >= helperSpin || !gate.open() {
					break
				}
			}
			runtime.Gosched()
		}
		helper.awake.Store(false)
		helper.alive.Store(false)
		// A job posted after the last look, whose caller saw alive still
		// set and started no helper: take it back, unless another
		// helper was started since.
		if j := helper.job.Load(); j != nil && j.next.Load() < j.n && helper.alive.CompareAndSwap(false, true) {
			helper.awake.Store(true)
			continue
		}
		return
	}
}

// Piece is the bytes of a piece of keyed work, about: enough that a
// piece's fixed costs (its tag page lookups, its tuple checks and mapped
// read, a kernel call's set-up and AES-CTR stream) do not count, the last
// pieces of a request being smaller (Pieces), while a request still makes
// enough pieces for two goroutines to share.
const Piece = 128 << 10

// MinBytes is the size from which keyed work is cut into pieces (Blocks,
// Pieces): a smaller request is done on the caller.
const MinBytes = 128 << 10

// pieceBlocks is the blocks of a piece of Piece bytes of blocks of bs
// bytes: a multiple of kernelGroup from that many blocks on
// (KernelBlocks).
func pieceBlocks(bs int) int {
	return KernelBlocks(Piece / bs)
}

// kernelGroup is the blocks the amd64 Poly1305 kernels take at a time, in
// all their forms: four (avx2, avx2r8), six (hybrid, hybrid8) or eight
// (avx512ifma); the blocks left over from a call take a slower one. It is
// a multiple of all three, so that no piece leaves blocks over to a
// slower kernel.
const kernelGroup = 24

// KernelBlocks rounds a piece of n blocks down to a multiple of
// kernelGroup from that many blocks on, and up to one block.
func KernelBlocks(n int) int {
	n = max(1, n)
	if n >= kernelGroup {
		n -= n % kernelGroup
	}
	return n
}

// Pieces cuts n blocks into the pieces of a Work call: pieces of per
// blocks (pieceBlocks), then the last two to three pieces' worth of blocks
// in pieces of a quarter of that (at least a block, rounded by
// KernelBlocks). The last piece is the one a goroutine finishes while the
// other waits or idles, so the smaller the last pieces the less of a
// request runs on one CPU, while small pieces throughout would multiply a
// piece's fixed costs.
type Pieces struct {
	n, per, tail int // blocks, the head's piece size, the tail's
	head         int // the head's pieces: blocks [0, head*per)
	pieces       int
}

// NewPieces returns the pieces of n blocks of bs bytes.
func NewPieces(n, bs int) Pieces {
	per := pieceBlocks(bs)
	tail := min(per, KernelBlocks(Piece/4/bs))
	head := max(0, n-2*per) / per
	rest := n - head*per
	return Pieces{n: n, per: per, tail: tail, head: head, pieces: head + (rest+tail-1)/tail}
}

// Len returns the number of pieces.
func (b Pieces) Len() int { return b.pieces }

// At returns the blocks [i, j) of piece p.
func (b Pieces) At(p int) (i, j int) {
	if p < b.head {
		return p * b.per, (p + 1) * b.per
	}
	i = b.head*b.per + (p-b.head)*b.tail
	return i, min(b.n, i+b.tail)
}

// Blocks runs fn over the pieces of n blocks of bs bytes (Pieces) with
// Work: fn(w, i, j) is worker w's piece of blocks [i, j).
func Blocks(n, bs int, fn func(w, i, j int) bool) bool {
	bp := NewPieces(n, bs)
	return Work(bp.pieces, func(w, p int) bool {
		i, j := bp.At(p)
		return fn(w, i, j)
	})
}

// Stats are the split's counters, for the tests and benchmarks of its
// users: the helper goroutines started, and the times the gate turned the
// split off, since the program started.
type Stats struct {
	HelperStarts int64
	GateClosings int64
}

// ReadStats returns the split's counters.
func ReadStats() Stats {
	return Stats{HelperStarts: helper.started.Load(), GateClosings: gate.offs.Load()}
}

// HelperAlive reports whether a helper goroutine runs (for the tests and
// benchmarks of its users, which wait for it to exit).
func HelperAlive() bool { return helper.alive.Load() }

// Open reports whether Work would share a job with the helper now: two
// or more Ps, and the gate open. A caller whose serial path is cheaper
// than running its pieces one after the other (a read that classifies a
// whole run in one call) takes that path while the split is off; the
// gate opens again by itself after its backoff, and the next Work
// measures again.
func Open() bool { return runtime.GOMAXPROCS(0) >= 2 && gate.open() }

// Hold keeps the split off until the function it returns is called: for
// the tests of its users' paths while the gate is closed. (Force wins.)
func Hold() (restore func()) {
	gate.held.Store(true)
	return func() { gate.held.Store(false) }
}

// Force keeps the split on, whatever the gate has measured, until the
// function it returns is called: for the tests of its users, whose pieces
// must run on both goroutines whatever the machine's load.
func Force() (restore func()) {
	gate.forced.Store(true)
	return func() { gate.forced.Store(false); gate.reset() }
}
