package blockdev

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/check"
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
//     every other block of it, read and verified; if one of those fails
//     too, the stripe's checksums are dropped: its parity is not updated,
//     never used, and ComputeParity records it again;
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
				_, rec, _ = pv.sumsNoCopy(s)
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
	return sums, ok, nil
}

// prepare computes the new parity of pu's stripes, before the write's
// data reaches the device. Caller holds pv.mu (until finish) and flushMu.
func (pv *parityVol) prepare(pu *parityUpdate) error {
	k, m, bs := pv.l.DataShards(), pv.m, pv.bs
	// The old data of the changed blocks, a run at a time.
	lbas := slices.Sorted(maps.Keys(pu.blocks))
	old := make(map[int64][]byte, len(lbas)) // nil: zeros
	bad := make(map[int64]bool)              // stripes whose delta cannot be used
	buf := device.AlignedBuffer(len(lbas) * bs)
	tuples := make([]byte, min(len(lbas), pv.v.chunk)*pv.v.ts)
	var sums []uint32
	if pv.v.sums {
		sums = make([]uint32, min(len(lbas), pv.v.chunk))
	}
	written := store.NewBitmap(min(len(lbas), pv.v.chunk))
	for i := 0; i < len(lbas); {
		j := i + 1
		for j < len(lbas) && j-i < pv.v.chunk && lbas[j] == lbas[j-1]+1 {
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
	pu.par = make(map[int64][]byte, len(pu.stripes))
	zero := make([]byte, bs)
	errs := make([]error, m)
	shards := make([][]byte, k+m)
	newData := make([][]byte, k)
	blocks := make([]int64, 0, k)
	for _, s := range pu.stripes {
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
		par := make([]byte, m*bs)
		clear(shards)
		for j := range m {
			shards[k+j] = par[j*bs : (j+1)*bs]
		}
		if changed == present {
			// The whole stripe is written: encode it.
			for pos, b := range blocks {
				if b >= 0 {
					shards[pos] = orZero(pu.blocks[b], zero)
				}
			}
			if err := pv.codec.Encode(shards); err != nil {
				return err
			}
			pu.par[s] = par
			continue
		}
		if !bad[s] {
			sums, _, err := pv.sumsNoCopy(s)
			if err != nil {
				return err
			}
			nb, err := pv.file.Read(s, par, sums, errs)
			if err != nil {
				return err
			}
			if nb == 0 {
				clear(newData)
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

func orZero(b, zero []byte) []byte {
	if b == nil {
		return zero
	}
	return b
}

// computeStripe computes stripe s's parity into par (m blocks) from its
// data: the blocks in news with their new data, the others read and
// verified against their current tuples. It returns false, and par means
// nothing, if one of those does not verify. Caller holds pv.mu.
func (pv *parityVol) computeStripe(s int64, news map[int64][]byte, par []byte) (bool, error) {
	k, m, bs := pv.l.DataShards(), pv.m, pv.bs
	shards := make([][]byte, k+m)
	zero := make([]byte, bs)
	for j := range m {
		shards[k+j] = par[j*bs : (j+1)*bs]
	}
	for pos := range k {
		b, ok := pv.l.Block(s, pos)
		if !ok {
			continue
		}
		if nd, ok := news[b]; ok {
			shards[pos] = orZero(nd, zero)
			continue
		}
		d := device.AlignedBuffer(bs)
		st, err := pv.loadBlock(b, d)
		if err != nil {
			return false, err
		}
		switch st {
		case blockBad:
			return false, nil
		case blockGood:
			shards[pos] = d
		}
	}
	if err := pv.codec.Encode(shards); err != nil {
		return false, err
	}
	return true, nil
}

// finish writes pu's new parity and sets its checksums (or drops those of
// the stripes it could not update), after the write's data. Caller holds
// pv.mu (since prepare) and flushMu.
func (pv *parityVol) finish(pu *parityUpdate) error {
	sums := make([]uint32, pv.m)
	for _, s := range pu.stripes {
		par := pu.par[s]
		if par == nil {
			pv.dropped.Add(1)
			if err := pv.setSums(s, nil); err != nil {
				return err
			}
			continue
		}
		pv.writeBad.Store(true)
		if err := pv.file.Write(s, par, sums); err != nil {
			return err
		}
		if err := pv.setSums(s, sums); err != nil {
			return err
		}
	}
	return nil
}

// writeParity runs the parity steps of a write around write, which puts
// the data on the device: prepare, write, finish, under pv.mu. x must
// have been committed (synced) with begin's parity intents. pu may be nil
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
const parityWindowBytes = 16 << 20

// ComputeParity computes and records the parity of every stripe that has
// none: after AddParity, or to resume a computation that was interrupted,
// or after writes dropped some. It reads the data a window of stripes at a
// time (their k blocks are k runs of neighbouring blocks), verifies every
// block against its tuple, encodes the stripes, writes their parity and
// syncs; a stripe with a block that does not verify is left unprotected.
// Writes may go on meanwhile.
func (v *Volume) ComputeParity(ctx context.Context, progress ParityProgress) (ParityReport, error) {
	var rep ParityReport
	done, err := v.enter()
	if err != nil {
		return rep, err
	}
	defer done()
	pv := v.par
	if pv == nil {
		return rep, fmt.Errorf("blockdev: compute parity: the volume has no parity in use")
	}
	if v.opts.ReadOnly {
		return rep, fmt.Errorf("blockdev: compute parity: %w", device.ErrReadOnly)
	}
	l := pv.l
	k, m, bs := l.DataShards(), pv.m, pv.bs
	w := max(1, int64(parityWindowBytes/(k*bs)))
	data := device.AlignedBuffer(int(min(w, l.Depth())) * k * bs)
	par := device.AlignedBuffer(int(min(w, l.Depth())) * m * bs)
	total := l.Stripes()
	shards := make([][]byte, k+m)
	sums := make([]uint32, m)
	var sinceSync int64
	for s0 := int64(0); s0 < total; {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		// The window: stripes [s0, s1) of one group.
		g := s0 / l.Depth()
		s1 := min(s0+w, (g+1)*l.Depth(), total)
		n := int(s1 - s0)
		err := func() error {
			v.stg.flushMu.Lock()
			defer v.stg.flushMu.Unlock()
			pv.mu.Lock()
			todo := make([]bool, n)
			any := false
			for i := range n {
				_, rec, err := pv.sumsNoCopy(s0 + int64(i))
				if err != nil {
					pv.mu.Unlock()
					return err
				}
				todo[i] = !rec
				any = any || !rec
				if rec {
					rep.Recorded++
				}
			}
			pv.mu.Unlock()
			if !any {
				return nil
			}
			x := v.tup.NewTxn()
			for i := range n {
				if todo[i] && !pv.marked[s0+int64(i)] {
					if err := x.MarkParityDirty(s0 + int64(i)); err != nil {
						x.Abort()
						return err
					}
					pv.marked[s0+int64(i)] = true
				}
			}
			if err := x.Commit(true); err != nil {
				return v.fail(err)
			}
			pv.mu.Lock()
			defer pv.mu.Unlock()
			good, err := pv.readWindow(s0, n, data)
			if err != nil {
				return v.fail(err)
			}
			for i := range n {
				if !todo[i] {
					continue
				}
				s := s0 + int64(i)
				if !good[i] {
					rep.Unprotected++
					continue
				}
				clear(shards)
				for pos := range k {
					if _, ok := l.Block(s, pos); ok {
						shards[pos] = data[(pos*n+i)*bs : (pos*n+i+1)*bs]
					}
				}
				p := par[i*m*bs : (i+1)*m*bs]
				for j := range m {
					shards[k+j] = p[j*bs : (j+1)*bs]
				}
				if err := pv.codec.Encode(shards); err != nil {
					return err
				}
				pv.writeBad.Store(true)
				if err := pv.file.Write(s, p, sums); err != nil {
					return v.fail(err)
				}
				if err := pv.setSums(s, sums); err != nil {
					return v.fail(err)
				}
				rep.Computed++
			}
			return nil
		}()
		if err != nil {
			return rep, err
		}
		sinceSync += int64(n)
		s0 = s1
		if sinceSync*int64(k*bs) >= 256<<20 || s0 == total {
			sinceSync = 0
			v.stg.flushMu.Lock()
			err := v.stg.syncLocked()
			v.stg.flushMu.Unlock()
			if err != nil {
				return rep, err
			}
		}
		if progress != nil {
			progress(s0, total)
		}
	}
	return rep, nil
}

// readWindow reads the data of stripes [s0, s0+n) of one group into data
// (position pos of stripe s0+i at block pos·n+i: the stripes' blocks at
// one position are neighbours on the device, one read), zeros for the
// unwritten blocks and the positions that hold none, and reports which
// stripes' blocks all verify. Caller holds pv.mu and flushMu.
func (pv *parityVol) readWindow(s0 int64, n int, data []byte) ([]bool, error) {
	l, k, bs, ts := pv.l, pv.l.DataShards(), pv.bs, pv.v.ts
	good := make([]bool, n)
	for i := range good {
		good[i] = true
	}
	tuples := make([]byte, n*ts)
	var sums []uint32
	if pv.v.sums {
		sums = make([]uint32, n)
	}
	written := store.NewBitmap(n)
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
		clear(written)
		if err := pv.tuplesOf(first, run, tuples, sums, written); err != nil {
			return nil, err
		}
		readErr := readDevice(pv.v.dev, row[:run*bs], first*int64(bs), false)
		for i := range run {
			d := row[i*bs : (i+1)*bs]
			b := first + int64(i)
			if !written.Has(i) {
				clear(d)
				continue
			}
			if readErr != nil {
				if err := readDevice(pv.v.dev, d, b*int64(bs), false); err != nil {
					if check.Fatal(err) {
						return nil, err
					}
					good[i] = false
					continue
				}
			}
			var sum uint32
			if sums != nil {
				sum = sums[i]
			}
			if !pv.v.ok(d, tuples[i*ts:(i+1)*ts], pv.v.params(b), true, sum) {
				good[i] = false
			}
		}
	}
	return good, nil
}
