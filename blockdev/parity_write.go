package blockdev

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/check"
	"github.com/difctl/difctl/blockdev/parity"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// The parity of the write path (see parity_volume.go for the contract).
//
// A write (a staging batch, or a piece of a discard) changes some blocks.
// For each recorded stripe it touches:
//
//  1. begin: a parity intent for the stripe goes into the write's synced
//     intent commit (unless one is open already);
//  2. prepare, with pv.mu held until finish: the old data of the changed
//     blocks is read from the device and verified against the tuples it
//     was written with, and the stripe's parity read and checked against
//     its checksums. If all is well the new parity is the old plus the
//     Reed-Solomon contribution of old XOR new (Codec.Update: 1+m reads
//     for a one-block write); a write that covers the whole stripe encodes
//     it from the new data alone. Otherwise (an old block or a parity
//     block fails) the stripe is computed whole from the new data and
//     every other block of it, read and verified, a failing one rebuilt
//     from the parity when the stripe has at most m erasures (and used
//     only if it verifies: computeStripe); otherwise the stripe's
//     checksums are dropped: its parity is not updated, never used, and
//     ComputeParity records it again;
//  3. the data is written to the device;
//  4. finish: the new parity is written to the parity file, its checksums
//     set in the cached pages, still under pv.mu.
//
// The checksums are committed, and the parity intents dropped, by the
// fold of the next Sync (parityVol.fold), after the device and the parity
// file are synced. Discarded blocks count as zeros.

// parityUpdate is the parity work of one write.
type parityUpdate struct {
	blocks  map[int64][]byte // changed block -> its new data (nil: zeros)
	stripes []int64          // the recorded stripes they touch, sorted
	par     map[int64][]byte // stripe -> new parity (m blocks), nil: dropped
	buf     []byte           // the stripes' parity, in order of stripes
}

// pchange is a run of changed blocks: n blocks at lba with new data data
// (nil: zeros).
type pchange struct {
	lba  int64
	n    int
	data []byte
}

// begin returns the parity work of a write of changes (later ones win
// where they overlap), and stages in x a parity intent for each recorded
// stripe it touches that has none open. It returns nil if no recorded
// stripe is touched. Caller holds flushMu.
func (pv *parityVol) begin(x *store.Txn, changes []pchange) (*parityUpdate, error) {
	pv.mu.Lock()
	defer pv.mu.Unlock()
	pu := &parityUpdate{blocks: make(map[int64][]byte)}
	seen := make(map[int64]bool)
	for _, c := range changes {
		for i := range c.n {
			b := c.lba + int64(i)
			var d []byte
			if c.data != nil {
				d = c.data[i*pv.bs : (i+1)*pv.bs]
			}
			s, _ := pv.l.Locate(b)
			rec, ok := seen[s]
			if !ok {
				var err error
				if _, rec, err = pv.sumsNoCopy(s); err != nil {
					return nil, err
				}
				seen[s] = rec
				if rec {
					pu.stripes = append(pu.stripes, s)
				}
			}
			if rec {
				pu.blocks[b] = d
			}
		}
	}
	if len(pu.stripes) == 0 {
		return nil, nil
	}
	slices.Sort(pu.stripes)
	for _, s := range pu.stripes {
		if pv.marked[s] {
			continue
		}
		if err := x.MarkParityDirty(s); err != nil {
			return nil, err
		}
		pv.marked[s] = true
	}
	return pu, nil
}

// sumsNoCopy is sums without the copy, for a look. Caller holds pv.mu.
func (pv *parityVol) sumsNoCopy(s int64) ([]uint32, bool, error) {
	pg, err := pv.page(s)
	if err != nil {
		return nil, false, err
	}
	sums, ok := pg.Stripe(s)
	if pv.untrusted[s] {
		return nil, false, nil
	}
	return sums, ok, nil
}

// prepare computes the new parity of pu's stripes, before the write's
// data reaches the device. A stripe the write covers whole is encoded from
// the new data; for the others the old data of the changed blocks is read
// and verified, and their parity read (one request per run of neighbouring
// stripes, whose parity blocks are adjacent) and checked, for the delta.
// Caller holds pv.mu (until finish) and flushMu.
func (pv *parityVol) prepare(pu *parityUpdate) error {
	k, m, bs := pv.l.DataShards(), pv.m, pv.bs
	pu.par = make(map[int64][]byte, len(pu.stripes))
	pu.buf = device.AlignedBuffer(len(pu.stripes) * m * bs)
	zero := make([]byte, bs)
	shards := make([][]byte, k+m)
	blocks := make([]int64, 0, k)
	// The stripes written whole, encoded now; the others need the delta.
	var delta []int64
	var lbas []int64 // the changed blocks of those
	for i, s := range pu.stripes {
		par := pu.buf[i*m*bs : (i+1)*m*bs]
		blocks = pv.l.StripeBlocks(blocks[:0], s)
		changed, present := 0, 0
		for _, b := range blocks {
			if b < 0 {
				continue
			}
			present++
			if _, ok := pu.blocks[b]; ok {
				changed++
			}
		}
		if changed < present {
			delta = append(delta, s)
			for _, b := range blocks {
				if _, ok := pu.blocks[b]; ok && b >= 0 {
					lbas = append(lbas, b)
				}
			}
			continue
		}
		clear(shards)
		for j := range m {
			shards[k+j] = par[j*bs : (j+1)*bs]
		}
		for pos, b := range blocks {
			if b >= 0 {
				shards[pos] = orZero(pu.blocks[b], zero)
			}
		}
		if err := pv.codec.Encode(shards); err != nil {
			return err
		}
		pu.par[s] = par
	}
	if len(delta) == 0 {
		return nil
	}
	// The old data of the changed blocks, a run at a time.
	slices.Sort(lbas)
	old := make(map[int64][]byte, len(lbas)) // nil: zeros
	bad := make(map[int64]bool)              // stripes whose delta cannot be used
	buf := device.AlignedBuffer(len(lbas) * bs)
	chunk := min(len(lbas), pv.v.chunk)
	tuples := make([]byte, chunk*pv.v.ts)
	var sums []uint32
	if pv.v.sums {
		sums = make([]uint32, chunk)
	}
	written := store.NewBitmap(chunk)
	for i := 0; i < len(lbas); {
		j := i + 1
		for j < len(lbas) && j-i < chunk && lbas[j] == lbas[j-1]+1 {
			j++
		}
		lba, n := lbas[i], j-i
		data := buf[i*bs : j*bs]
		clear(written)
		if err := pv.tuplesOf(lba, n, tuples, sums, written); err != nil {
			return err
		}
		readErr := readDevice(pv.v.dev, data, lba*int64(bs), false)
		for q := range n {
			b := lba + int64(q)
			if !written.Has(q) {
				old[b] = nil
				continue
			}
			d := data[q*bs : (q+1)*bs]
			if readErr != nil {
				if err := readDevice(pv.v.dev, d, b*int64(bs), false); err != nil {
					if check.Fatal(err) {
						return err
					}
					s, _ := pv.l.Locate(b)
					bad[s] = true
					continue
				}
			}
			var sum uint32
			if pv.v.sums {
				sum = sums[q]
			}
			if !pv.v.ok(d, tuples[q*pv.v.ts:(q+1)*pv.v.ts], pv.v.params(b), true, sum) {
				s, _ := pv.l.Locate(b)
				bad[s] = true
				continue
			}
			old[b] = d
		}
		i = j
	}
	// The parity of the delta stripes, a run of neighbours at a time.
	index := make(map[int64]int, len(pu.stripes))
	for i, s := range pu.stripes {
		index[s] = i
	}
	parBad, err := pv.readParity(delta, func(s int64) []byte {
		i := index[s]
		return pu.buf[i*m*bs : (i+1)*m*bs]
	})
	if err != nil {
		return err
	}
	newData := make([][]byte, k)
	for _, s := range delta {
		i := index[s]
		par := pu.buf[i*m*bs : (i+1)*m*bs]
		if !bad[s] && !parBad[s] {
			blocks = pv.l.StripeBlocks(blocks[:0], s)
			clear(shards)
			clear(newData)
			for j := range m {
				shards[k+j] = par[j*bs : (j+1)*bs]
			}
			for pos, b := range blocks {
				nd, ok := pu.blocks[b]
				if b < 0 || !ok {
					continue
				}
				o := old[b]
				if o == nil {
					o = make([]byte, bs) // Update overwrites it with old XOR new
				}
				shards[pos], newData[pos] = o, orZero(nd, zero)
			}
			if err := pv.codec.Update(shards, newData); err != nil {
				return err
			}
			pu.par[s] = par
			continue
		}
		// The delta cannot be used: compute the stripe whole.
		ok, err := pv.computeStripe(s, pu.blocks, par)
		if err != nil {
			return err
		}
		if ok {
			pu.par[s] = par
		} else {
			pu.par[s] = nil
		}
	}
	return nil
}

// readParity reads the parity of stripes (sorted) into bufOf(s), one
// request per run of neighbouring stripes, and reports the stripes with a
// parity block that fails its checksum or cannot be read. Caller holds
// pv.mu.
func (pv *parityVol) readParity(stripes []int64, bufOf func(int64) []byte) (map[int64]bool, error) {
	m, bs := pv.m, pv.bs
	bad := make(map[int64]bool)
	errs := make([]error, m)
	for i := 0; i < len(stripes); {
		j := i + 1
		for j < len(stripes) && stripes[j] == stripes[j-1]+1 && j-i < 1024 {
			j++
		}
		// The run's buffers are adjacent when its stripes were given
		// buffers in order (prepare's): read it in one request then.
		first := bufOf(stripes[i])
		whole := first[:cap(first)]
		if len(whole) >= (j-i)*m*bs && &whole[(j-i-1)*m*bs] == &bufOf(stripes[j-1])[0] {
			if _, err := pv.dev.ReadAt(whole[:(j-i)*m*bs], pv.l.ParityOffset(stripes[i], 0)); err == nil {
				for _, s := range stripes[i:j] {
					sums, _, err := pv.sumsNoCopy(s)
					if err != nil {
						return nil, err
					}
					p := bufOf(s)
					for q := range m {
						if parity.Checksum(s, q, p[q*bs:(q+1)*bs]) != sums[q] {
							bad[s] = true
						}
					}
				}
				i = j
				continue
			} else if check.Fatal(err) {
				return nil, fmt.Errorf("blockdev: reading the parity of stripes [%d, %d]: %w", stripes[i], stripes[j-1], err)
			}
		}
		for _, s := range stripes[i:j] {
			sums, _, err := pv.sumsNoCopy(s)
			if err != nil {
				return nil, err
			}
			nb, err := pv.file.Read(s, bufOf(s), sums, errs)
			if err != nil {
				return nil, err
			}
			if nb > 0 {
				bad[s] = true
			}
		}
		i = j
	}
	return bad, nil
}

func orZero(b, zero []byte) []byte {
	if b == nil {
		return zero
	}
	return b
}

// computeStripe computes stripe s's parity into par (m blocks) from its
// data: the blocks in news with their new data, the others read and
// verified against their current tuples. A block that does not verify is
// rebuilt from the stripe's present parity when the stripe has at most m
// erasures (its failing blocks, changed or not, and its parity blocks
// that fail their checksums), and used only if the rebuilt block
// verifies; so a write into a stripe with a bad block keeps the stripe
// protected, the bad block's true contents encoded. It returns false, and
// par means nothing, if some unchanged block can be neither read nor
// rebuilt. Caller holds pv.mu.
func (pv *parityVol) computeStripe(s int64, news map[int64][]byte, par []byte) (bool, error) {
	k, m, bs := pv.l.DataShards(), pv.m, pv.bs
	buf, nbad, err := pv.loadStripe(s, nil)
	if err != nil {
		return false, err
	}
	blocks := pv.l.StripeBlocks(make([]int64, 0, k), s)
	// The unchanged blocks that fail: none, or rebuilt.
	need := false
	for pos, b := range blocks {
		if _, changed := news[b]; pv.badPos[pos] && !changed {
			need = true
		}
	}
	if need {
		ok, err := pv.rebuildBad(s, blocks, buf, nbad, news)
		if err != nil || !ok {
			return false, err
		}
	}
	shards := make([][]byte, k+m)
	for pos, b := range blocks {
		shards[pos] = buf[pos*bs : (pos+1)*bs]
		if nd, ok := news[b]; ok && b >= 0 {
			if nd == nil {
				clear(shards[pos])
			} else {
				shards[pos] = nd
			}
		}
	}
	for j := range m {
		shards[k+j] = par[j*bs : (j+1)*bs]
	}
	if err := pv.codec.Encode(shards); err != nil {
		return false, err
	}
	return true, nil
}

// rebuildBad rebuilds, in buf (loadStripe's), the failing data blocks of
// stripe s (pv.badPos, nbad of them) from the stripe's parity, and
// verifies each that news does not change against its current tuple. It
// returns false if the stripe has no parity recorded, more than m
// erasures, or a rebuilt block that does not verify. Caller holds pv.mu.
func (pv *parityVol) rebuildBad(s int64, blocks []int64, buf []byte, nbad int, news map[int64][]byte) (bool, error) {
	k, m, bs := pv.l.DataShards(), pv.m, pv.bs
	sums, ok, err := pv.sums(s)
	if err != nil || !ok || nbad > m {
		return false, err
	}
	par := device.AlignedBuffer(m * bs)
	errs := make([]error, m)
	pbad, err := pv.file.Read(s, par, sums, errs)
	if err != nil || nbad+pbad > m {
		return false, err
	}
	shards := make([][]byte, k+m)
	erased := make([]bool, k+m)
	for pos := range k {
		shards[pos] = buf[pos*bs : (pos+1)*bs]
		erased[pos] = pv.badPos[pos]
	}
	for j := range m {
		if errs[j] == nil {
			shards[k+j] = par[j*bs : (j+1)*bs]
		} else {
			erased[k+j] = true // not wanted: nil
		}
	}
	if err := pv.codec.Rebuild(shards, erased); err != nil {
		return false, nil
	}
	for pos, b := range blocks {
		if _, changed := news[b]; !pv.badPos[pos] || changed || b < 0 {
			continue
		}
		ok, err := pv.verifyData(b, buf[pos*bs:(pos+1)*bs])
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// verifyData reports whether d verifies as block b's data against its
// current tuple (zeros for an unwritten block). Caller holds pv.mu.
func (pv *parityVol) verifyData(b int64, d []byte) (bool, error) {
	v := pv.v
	var tuple [16]byte
	var sums [1]uint32
	var sp []uint32
	if v.sums {
		sp = sums[:]
	}
	written := store.NewBitmap(1)
	if err := pv.tuplesOf(b, 1, tuple[:v.ts], sp, written); err != nil {
		return false, err
	}
	return v.ok(d, tuple[:v.ts], v.params(b), written.Has(0), sums[0]), nil
}

// loadStripe reads the data blocks of stripe s into the volume's stripe
// buffer (position pos at pos·bs; zeros for a position that holds no
// block, an unwritten block, and a block in skip, which is not read) and
// verifies each against its current tuple: nbad counts those that fail
// or cannot be read, marked in pv.badPos. A stripe of neighbouring blocks (depth 1)
// is read in one request. The buffer is valid until the next call. Caller
// holds pv.mu.
func (pv *parityVol) loadStripe(s int64, skip map[int64][]byte) (buf []byte, nbad int, err error) {
	k, bs := pv.l.DataShards(), pv.bs
	if pv.stripeBuf == nil {
		pv.stripeBuf = device.AlignedBuffer(k * bs)
		pv.badPos = make([]bool, k)
	}
	buf = pv.stripeBuf
	clear(pv.badPos)
	blocks := pv.l.StripeBlocks(make([]int64, 0, k), s)
	n := 0
	for n < k && blocks[n] >= 0 && blocks[n] == blocks[0]+int64(n) {
		n++
	}
	consecutive := n > 1
	for pos := n; pos < k; pos++ {
		if blocks[pos] >= 0 {
			consecutive = false
		}
	}
	if consecutive && len(skip) == 0 {
		clear(buf[n*bs:])
		fails, err := pv.readRun(blocks[0], n, buf[:n*bs])
		if err != nil {
			return nil, 0, err
		}
		for _, b := range fails {
			pv.badPos[b-blocks[0]] = true
		}
		return buf, len(fails), nil
	}
	for pos, b := range blocks {
		d := buf[pos*bs : (pos+1)*bs]
		if _, ok := skip[b]; ok || b < 0 {
			clear(d)
			continue
		}
		fails, err := pv.readRun(b, 1, d)
		if err != nil {
			return nil, 0, err
		}
		if len(fails) > 0 {
			nbad++
			pv.badPos[pos] = true
		}
	}
	return buf, nbad, nil
}

// finish writes pu's new parity and sets its checksums (or drops those of
// the stripes it could not update), after the write's data: one request
// per run of neighbouring stripes. Caller holds pv.mu (since prepare) and
// flushMu.
func (pv *parityVol) finish(pu *parityUpdate) error {
	m, bs := pv.m, pv.bs
	sums := make([]uint32, m)
	st := pu.stripes
	for i := 0; i < len(st); {
		if pu.par[st[i]] == nil {
			pv.dropped.Add(1)
			if err := pv.setSums(st[i], nil); err != nil {
				return err
			}
			i++
			continue
		}
		j := i + 1
		for j < len(st) && st[j] == st[j-1]+1 && pu.par[st[j]] != nil && j-i < 1024 {
			j++
		}
		pv.writeBad.Store(true)
		// pu.buf holds the stripes' parity in order: the run is adjacent.
		run := pu.buf[i*m*bs : j*m*bs]
		if _, err := pv.dev.WriteAt(run, pv.l.ParityOffset(st[i], 0)); err != nil {
			err = fmt.Errorf("blockdev: writing the parity of stripes [%d, %d]: %w", st[i], st[j-1], err)
			if check.Fatal(err) {
				return err
			}
			// The parity file failed: the run's parity is dropped, the
			// write goes on (sync).
			pv.ioFailed(err)
			for _, s := range st[i:j] {
				pv.dropped.Add(1)
				if err := pv.setSums(s, nil); err != nil {
					return err
				}
			}
			i = j
			continue
		}
		for q, s := range st[i:j] {
			p := run[q*m*bs : (q+1)*m*bs]
			for x := range m {
				sums[x] = parity.Checksum(s, x, p[x*bs:(x+1)*bs])
			}
			if err := pv.setSums(s, sums); err != nil {
				return err
			}
		}
		i = j
	}
	return nil
}

// around runs the parity steps of a write around write, which puts
// the data on the device: prepare, write, finish, under pv.mu. begin's
// parity intents must be durable (committed, synced) first. pu may be nil
// (no recorded stripe touched).
func (pv *parityVol) around(pu *parityUpdate, write func() error) error {
	if pu == nil {
		return write()
	}
	pv.mu.Lock()
	defer pv.mu.Unlock()
	if err := pv.prepare(pu); err != nil {
		return err
	}
	if err := write(); err != nil {
		return err
	}
	return pv.finish(pu)
}

// recoverParity settles the parity intents of a crashed session (Open,
// after the tuples' recovery): each named stripe's parity is computed
// from its data, which must verify against its tuples, written and
// synced, and its checksums committed with the intents dropped; a stripe
// with a block that does not verify has its checksums dropped. The data
// is synced first, so that the parity recorded describes durable data.
func (v *Volume) recoverParity(ctx context.Context) error {
	pv := v.par
	dirty, err := v.tup.ParityDirty()
	if err != nil {
		return fmt.Errorf("blockdev: recovery of volume %q: %w", v.opts.Name, err)
	}
	if len(dirty) == 0 {
		return nil
	}
	if err := v.dev.Sync(); err != nil {
		return fmt.Errorf("blockdev: recovery of volume %q: %w", v.opts.Name, err)
	}
	pv.mu.Lock()
	par := make([]byte, pv.m*pv.bs)
	sums := make([]uint32, pv.m)
	for _, s := range dirty {
		if err := ctx.Err(); err != nil {
			pv.mu.Unlock()
			return err
		}
		pv.marked[s] = true
		if s >= pv.l.Stripes() {
			continue // of no stripe: the intent is dropped
		}
		ok, err := pv.computeStripe(s, nil, par)
		if err == nil && ok {
			pv.writeBad.Store(true)
			if err = pv.file.Write(s, par, sums); err == nil {
				err = pv.setSums(s, sums)
			} else if !check.Fatal(err) {
				pv.ioFailed(err)
				pv.dropped.Add(1)
				err = pv.setSums(s, nil)
			}
		} else if err == nil {
			pv.dropped.Add(1)
			err = pv.setSums(s, nil)
		}
		if err != nil {
			pv.mu.Unlock()
			return fmt.Errorf("blockdev: recovery of volume %q: parity of stripe %d: %w", v.opts.Name, s, err)
		}
	}
	pv.mu.Unlock()
	v.recovery.ParityStripes = int64(len(dirty))
	return v.commitParity()
}

// commitParity syncs the parity file and commits the changed checksums
// with the parity intents dropped, synced. Caller holds flushMu (or has
// the volume to itself).
func (v *Volume) commitParity() error {
	pv := v.par
	if err := pv.sync(); err != nil {
		return err
	}
	x := v.tup.NewTxn()
	if err := pv.fold(x); err != nil {
		x.Abort()
		return err
	}
	if err := x.Commit(true); err != nil {
		return err
	}
	pv.folded()
	return nil
}

// ParityProgress reports ComputeParity's progress: stripes done (recorded
// before, computed, or left unprotected) of the total.
type ParityProgress func(done, total int64)

// ParityReport counts what ComputeParity did.
type ParityReport struct {
	// Computed stripes had their parity computed and recorded; Recorded
	// ones had it already (a resumed computation).
	Computed, Recorded int64
	// Unprotected stripes hold a block that does not verify: their parity
	// was not computed (repair the block, then compute again).
	Unprotected int64
}

// parityWindowBytes bounds the data ComputeParity reads at once.
var parityWindowBytes = 16 << 20

// parityWriteBytes bounds one parity write of ComputeParity (the parity of
// neighbouring stripes, adjacent in the file). Requests of 2 MiB into the
// page cache of a new parity file measured several times the CPU time of
// the same bytes in requests of 128 KiB (Linux 6.18, the time in the
// kernel's copy from the caller's buffer; docs/parity.md, "Speed"); in
// single stripes the requests' count shows.
const parityWriteBytes = 128 << 10

// ComputeParity computes and records the parity of every stripe that has
// none: after AddParity, or to resume a computation that was interrupted,
// or after writes dropped some. It reads the data a window of stripes at a
// time (their k blocks are k runs of neighbouring blocks), verifies every
// block against its tuple, encodes the stripes, writes their parity and
// syncs; a stripe with a block that does not verify is left unprotected.
// Writes may go on meanwhile.
func (v *Volume) ComputeParity(ctx context.Context, progress ParityProgress) (ParityReport, error) {
	done, err := v.enter()
	if err != nil {
		return ParityReport{}, err
	}
	defer done()
	pv := v.par
	if pv == nil {
		return ParityReport{}, fmt.Errorf("blockdev: compute parity: the volume has no parity in use")
	}
	if v.opts.ReadOnly {
		return ParityReport{}, fmt.Errorf("blockdev: compute parity: %w", device.ErrReadOnly)
	}
	if err := v.keyedWritable("compute parity"); err != nil {
		return ParityReport{}, err
	}
	pp := pv.newPass()
	defer pp.release()
	rep := &pp.rep
	total := pv.l.Stripes()
	var sinceSync int64
	unsynced := false // stripes marked since the last sync
	for s0 := int64(0); s0 < total; {
		if err := ctx.Err(); err != nil {
			return *rep, err
		}
		s1 := pp.window(s0)
		n := int(s1 - s0)
		err := func() error {
			v.stg.flushMu.Lock()
			defer v.stg.flushMu.Unlock()
			todo, anyTodo, err := pp.todo(s0, n)
			if err != nil || !anyTodo {
				return err
			}
			unsynced = true
			if err := pp.mark(s0, todo); err != nil {
				return err
			}
			pp.buffers()
			pv.mu.Lock()
			defer pv.mu.Unlock()
			good, at, err := pv.readWindow(s0, n, pp.groups, pp.data)
			if err != nil {
				return v.fail(err)
			}
			return pp.encode(s0, todo, good, at)
		}()
		if err != nil {
			return *rep, err
		}
		sinceSync += int64(n)
		s0 = s1
		if unsynced && (sinceSync*int64(pv.l.DataShards()*pv.bs) >= 256<<20 || s0 == total) {
			// (A pass with nothing to do, after protect --parity computed
			// it all, syncs nothing.)
			sinceSync, unsynced = 0, false
			if err := pp.sync(); err != nil {
				return *rep, err
			}
		}
		if progress != nil {
			progress(s0, total)
		}
	}
	return *rep, nil
}

// parityPass is one pass that computes the parity of stripes a window at
// a time: ComputeParity, and protect on a volume with parity (see
// protectParity), which differ in where the window's data comes from and
// whether it is verified.
type parityPass struct {
	pv *parityVol
	// win is the stripes of a window: whole groups (groups: their blocks
	// are one run, read at once) if a group's data fits in
	// parityWindowBytes, otherwise part of one group (its k runs).
	win    int64
	groups bool
	data   []byte   // a window's data blocks (see buffers)
	par    []byte   // a window's parity blocks, as in the file
	sums   []uint32 // a window's parity checksums
	shards [][]byte // one stripe's, for the codec
	runs   []byte   // a group's parity runs (encodeGroups)
	rep    ParityReport
}

// newPass returns a pass over pv's stripes, its buffers allocated.
func (pv *parityVol) newPass() *parityPass {
	l := pv.l
	k, m, bs := l.DataShards(), pv.m, pv.bs
	w := max(1, int64(parityWindowBytes/(k*bs)))
	D := l.Depth()
	pp := &parityPass{pv: pv, win: min(w, D), groups: D <= w}
	if pp.groups {
		pp.win = (w / D) * D
	}
	pp.sums = make([]uint32, int(pp.win)*m)
	pp.shards = make([][]byte, k+m)
	return pp
}

// passBufs are a parity pass's window buffers, kept in passPool between
// passes: protect --parity runs two in one process (protect's own, then
// ComputeParity for what it left), and a window is 18 MiB for 16+2 at
// 4 KiB blocks, whose first use (page faults and clearing) cost a sixth of
// computing the parity of a 64 MiB image.
type passBufs struct{ data, par []byte }

var passPool sync.Pool // *passBufs

// buffers gives the pass its window buffers, the first time it needs
// them (a ComputeParity with nothing to do needs none).
func (pp *parityPass) buffers() {
	if pp.data != nil {
		return
	}
	k, m, bs := pp.pv.l.DataShards(), pp.pv.m, pp.pv.bs
	nd, np := int(pp.win)*k*bs, int(pp.win)*m*bs
	if b, ok := passPool.Get().(*passBufs); ok && len(b.data) >= nd && len(b.par) >= np {
		pp.data, pp.par = b.data[:nd], b.par[:np]
		return
	}
	pp.data, pp.par = device.AlignedBuffer(nd), device.AlignedBuffer(np)
}

// release returns the pass's buffers to passPool; the pass must not be
// used after.
func (pp *parityPass) release() {
	if pp.data != nil {
		passPool.Put(&passBufs{data: pp.data[:cap(pp.data)], par: pp.par[:cap(pp.par)]})
		pp.data, pp.par = nil, nil
	}
}

// window returns the end of the window that starts at stripe s0: whole
// groups, or the rest of s0's group.
func (pp *parityPass) window(s0 int64) int64 {
	s1 := min(s0+pp.win, pp.pv.l.Stripes())
	if !pp.groups {
		D := pp.pv.l.Depth()
		s1 = min(s1, (s0/D+1)*D)
	}
	return s1
}

// todo reports which of the n stripes from s0 have no parity recorded, and
// whether any, counting the others in rep.Recorded.
func (pp *parityPass) todo(s0 int64, n int) ([]bool, bool, error) {
	pv := pp.pv
	pv.mu.Lock()
	defer pv.mu.Unlock()
	todo := make([]bool, n)
	anyTodo := false
	for i := range n {
		_, rec, err := pv.sumsNoCopy(s0 + int64(i))
		if err != nil {
			return nil, false, err
		}
		todo[i] = !rec
		anyTodo = anyTodo || !rec
		if rec {
			pp.rep.Recorded++
		}
	}
	return todo, anyTodo, nil
}

// mark puts the stripes to do from s0 under parity intents (which the
// next Sync drops once their parity is synced and their checksums
// committed, or whose checksums it drops if the parity file's sync fails),
// in one unsynced store commit. Unsynced is enough: a stripe to do has no
// checksums, so its parity is never used before the Sync that syncs the
// parity file commits them, with the intents dropped, in one synced
// commit; an intent a crash loses leaves a stripe without parity, as it
// was. Caller holds flushMu.
func (pp *parityPass) mark(s0 int64, todo []bool) error {
	pv := pp.pv
	x := pv.v.tup.NewTxn()
	for i, t := range todo {
		if t && !pv.marked[s0+int64(i)] {
			if err := x.MarkParityDirty(s0 + int64(i)); err != nil {
				x.Abort()
				return err
			}
			pv.marked[s0+int64(i)] = true
		}
	}
	if err := x.Commit(false); err != nil {
		return pv.v.fail(err)
	}
	return nil
}

// encode encodes the stripes to do from s0 whose blocks are good, from
// their blocks in pp.data (block b, position pos of stripe s0+i, at byte
// at(b, pos, i)), then writes each run of neighbouring computed stripes in
// requests of up to parityWriteBytes (stripes' parity is adjacent in the
// file, as in pp.par) and records their checksums, which the next Sync
// commits. The others to do count as unprotected. Caller holds pv.mu and
// flushMu.
func (pp *parityPass) encode(s0 int64, todo, good []bool, at func(b int64, pos, i int) int) error {
	pv, v, l := pp.pv, pp.pv.v, pp.pv.l
	k, m, bs := l.DataShards(), pv.m, pv.bs
	n := len(todo)
	computed := make([]bool, n)
	if err := pp.encodeGroups(s0, todo, good, at, computed); err != nil {
		return err
	}
	for i := range n {
		if !todo[i] || computed[i] {
			continue
		}
		s := s0 + int64(i)
		if !good[i] {
			pp.rep.Unprotected++
			continue
		}
		clear(pp.shards)
		for pos := range k {
			if b, ok := l.Block(s, pos); ok {
				o := at(b, pos, i)
				pp.shards[pos] = pp.data[o : o+bs]
			}
		}
		p := pp.par[i*m*bs : (i+1)*m*bs]
		for j := range m {
			pp.shards[k+j] = p[j*bs : (j+1)*bs]
		}
		if err := pv.codec.Encode(pp.shards); err != nil {
			return err
		}
		computed[i] = true
	}
	for i := 0; i < n; {
		if !computed[i] {
			i++
			continue
		}
		j := i + 1
		for j < n && computed[j] && (j-i)*m*bs < parityWriteBytes {
			j++
		}
		s := s0 + int64(i)
		pv.writeBad.Store(true)
		if err := pv.file.WriteStripes(s, j-i, pp.par[i*m*bs:j*m*bs], pp.sums[:(j-i)*m]); err != nil {
			if check.Fatal(err) {
				return v.fail(err)
			}
			// The parity file failed: these stripes stay without parity,
			// and the computation stops.
			pv.ioFailed(err)
			return fmt.Errorf("blockdev: compute parity: %w", err)
		}
		for x := i; x < j; x++ {
			if err := pv.setSums(s0+int64(x), pp.sums[(x-i)*m:(x-i+1)*m]); err != nil {
				return v.fail(err)
			}
			pp.rep.Computed++
		}
		i = j
	}
	if wb, ok := pv.dev.(device.WritebackStarter); ok {
		// The window's parity starts for the medium now, so that the
		// next Sync (the pass's last, above all) waits for less. A hint:
		// an error here is the Sync's to report.
		_ = wb.StartWriteback(pv.l.ParityOffset(s0, 0), int64(n*m*bs))
	}
	return nil
}

// encodeGroups encodes, a group at a time, the whole groups of a window
// of whole groups (pp.groups) all of whose stripes are to do and good:
// position pos of a full group's D stripes is a run of D neighbouring
// blocks, so the group is one Codec.EncodeRuns of k runs of D blocks (the
// library's fast path, against D calls over single blocks), whose m parity
// runs are then laid out stripe by stripe in pp.par. It marks the stripes
// it computed; the others are left to encode's stripe by stripe loop.
func (pp *parityPass) encodeGroups(s0 int64, todo, good []bool, at func(b int64, pos, i int) int, computed []bool) error {
	if !pp.groups {
		return nil
	}
	pv, l := pp.pv, pp.pv.l
	k, m, bs, D := l.DataShards(), pv.m, pv.bs, l.Depth()
	n := int64(len(todo))
	for g0 := s0; g0+D <= s0+n; g0 += D {
		// A full group: its k·D blocks all exist.
		if (g0/D+1)*D*int64(k) > l.Blocks() {
			break
		}
		all := true
		for i := g0 - s0; i < g0-s0+D && all; i++ {
			all = todo[i] && good[i]
		}
		if !all {
			continue
		}
		if pp.runs == nil {
			pp.runs = device.AlignedBuffer(m * int(D) * bs)
		}
		first, _ := l.Block(g0, 0)
		o := at(first, 0, int(g0-s0))
		run := int(D) * bs
		for pos := range k {
			pp.shards[pos] = pp.data[o+pos*run : o+(pos+1)*run]
		}
		for j := range m {
			pp.shards[k+j] = pp.runs[j*run : (j+1)*run]
		}
		if err := pv.codec.EncodeRuns(pp.shards); err != nil {
			return err
		}
		for c := range int(D) {
			i := int(g0-s0) + c
			for j := range m {
				copy(pp.par[(i*m+j)*bs:(i*m+j+1)*bs], pp.runs[j*run+c*bs:])
			}
			computed[i] = true
		}
	}
	return nil
}

// sync syncs the volume: the parity file, then the checksums of the
// stripes computed since the last sync are committed.
func (pp *parityPass) sync() error {
	s := pp.pv.v.stg
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	return s.syncLocked()
}

// readWindow reads the data of stripes [s0, s0+n) into data, zeros for
// the unwritten blocks, and reports which stripes' blocks all verify, and
// where in data block b, position pos of stripe s0+i, is (at: a byte
// offset). A window of whole groups (groups: s0 starts a group, s0+n ends
// one or is the last stripe) is one run of blocks, read at once;
// one inside a group is k runs, one per position (position pos of stripe
// s0+i at block pos·n+i: the stripes' blocks at one position are
// neighbours on the device). Caller holds pv.mu and flushMu.
func (pv *parityVol) readWindow(s0 int64, n int, groups bool, data []byte) ([]bool, func(b int64, pos, i int) int, error) {
	l, k, bs := pv.l, pv.l.DataShards(), pv.bs
	D := l.Depth()
	good := make([]bool, n)
	for i := range good {
		good[i] = true
	}
	s1 := s0 + int64(n)
	if groups {
		// Whole groups: blocks [first, end) in order.
		first, _ := l.Block(s0, 0)
		end := min((s1+D-1)/D*D*int64(k), l.Blocks())
		bad, err := pv.readRun(first, int(end-first), data)
		if err != nil {
			return nil, nil, err
		}
		for _, b := range bad {
			s, _ := l.Locate(b)
			good[s-s0] = false
		}
		return good, func(b int64, _, _ int) int { return int(b-first) * bs }, nil
	}
	for pos := range k {
		first, ok := l.Block(s0, pos)
		run := 0
		if ok {
			for run < n {
				if b, ok := l.Block(s0+int64(run), pos); !ok || b != first+int64(run) {
					break
				}
				run++
			}
		}
		row := data[pos*n*bs : (pos+1)*n*bs]
		clear(row[run*bs:])
		if run == 0 {
			continue
		}
		bad, err := pv.readRun(first, run, row)
		if err != nil {
			return nil, nil, err
		}
		for _, b := range bad {
			good[b-first] = false
		}
	}
	return good, func(_ int64, pos, i int) int { return (pos*n + i) * bs }, nil
}

// readRun reads blocks [first, first+n) into data (zeros for the
// unwritten ones), verifies them against their current tuples, a chunk at
// a time, and returns those that fail. Each chunk is one dif call
// (Format.Classify: guards, tags and sector sums in one pass), from the
// device's mapping of the page cache where it has one, copied to data in
// the verifying pass as a verified read does (readMapped), else read into
// data first; a read that fails is retried block by block and the blocks
// that still cannot be read fail. Caller holds pv.mu and flushMu.
func (pv *parityVol) readRun(first int64, n int, data []byte) ([]int64, error) {
	v := pv.v
	bs, ts := pv.bs, v.ts
	chunk := min(n, v.chunk)
	tuples := make([]byte, chunk*ts)
	states := make([]dif.State, chunk)
	var sums, crcs []uint32
	if v.sums {
		sums, crcs = make([]uint32, chunk), make([]uint32, chunk)
	}
	written := store.NewBitmap(chunk)
	ioBad := store.NewBitmap(chunk)
	var bad []int64
	for c := 0; c < n; c += chunk {
		cn := min(chunk, n-c)
		lba := first + int64(c)
		clear(written)
		clear(ioBad)
		if err := pv.tuplesOf(lba, cn, tuples, sums, written); err != nil {
			return nil, err
		}
		cd := data[c*bs : (c+cn)*bs]
		cls := dif.Classification{States: states[:cn]}
		if crcs != nil {
			cls.Sums = crcs[:cn]
		}
		classify := func(src []byte) error {
			cls.Src = src
			if _, err := v.f.Classify(&cls, cd, tuples[:cn*ts], v.params(lba)); err != nil {
				return fmt.Errorf("blockdev: compute parity: verify: %w", err)
			}
			return nil
		}
		mapped, err := pv.classifyMapped(lba, cn, classify)
		if err != nil {
			return nil, err
		}
		if !mapped {
			if err := pv.readBlocks(lba, cn, cd, ioBad); err != nil {
				return nil, err
			}
			if err := classify(nil); err != nil {
				return nil, err
			}
		}
		for i := range cn {
			if !written.Has(i) {
				clear(cd[i*bs : (i+1)*bs])
				continue
			}
			if ioBad.Has(i) || states[i] == dif.StateFailed || (crcs != nil && crcs[i] != sums[i]) {
				bad = append(bad, lba+int64(i))
			}
		}
	}
	return bad, nil
}

// classifyMapped runs classify on the device's mapping of the n blocks at
// lba, if it has one (see Volume.readMapped). mapped is false when the
// blocks must be read the ordinary way: no mapping, or reading it faulted.
func (pv *parityVol) classifyMapped(lba int64, n int, classify func([]byte) error) (mapped bool, err error) {
	v := pv.v
	if v.mapper == nil || v.noMap.Load() {
		return false, nil
	}
	return v.mappedDone(v.mapper, v.mapper.ReadMapped(lba*int64(pv.bs), n*pv.bs, classify))
}

// readBlocks reads the n blocks at lba into data; if that fails, block by
// block, each read again up to Options.Rereads times around the page
// cache, as a verified read does (readFallback), marking in ioBad those
// that cannot be read. An error check.Fatal accepts is returned.
func (pv *parityVol) readBlocks(lba int64, n int, data []byte, ioBad store.Bitmap) error {
	bs := pv.bs
	err := readDevice(pv.v.dev, data[:n*bs], lba*int64(bs), false)
	if err == nil {
		return nil
	}
	if check.Fatal(err) {
		return err
	}
	for i := range n {
		var err error
		for r := 0; r <= pv.v.opts.Rereads; r++ {
			if err = readDevice(pv.v.dev, data[i*bs:(i+1)*bs], (lba+int64(i))*int64(bs), r > 0); err == nil || check.Fatal(err) {
				break
			}
		}
		if err != nil {
			if check.Fatal(err) {
				return err
			}
			clear(data[i*bs : (i+1)*bs])
			ioBad.Set(i)
		}
	}
	return nil
}
