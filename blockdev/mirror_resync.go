package blockdev

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"time"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/store"
)

// Resync: a stale leg of a mirrored volume is brought back block by block.
// Only its stale blocks are looked at (its stale ranges, or all of it for
// a new or replaced leg): each chunk of them is read and verified as a
// read does, from a leg that holds it fresh (or from staging), under a
// shared lock of its blocks; the stale leg's copy is read, and every
// block whose copy differs is written with the verified one. A block no
// leg holds a copy of that verifies is never written: it stays stale on
// the leg, and failing. The leg is written with every write meanwhile (it
// is online), so the resync runs while the volume is in use. Every
// resyncCheckpoint bytes the leg is synced and a cursor saved, which a
// resync interrupted by a crash resumes from; once done, the leg's stale
// ranges are replaced by the blocks that failed (none: the leg is fresh),
// recorded with a synced commit.

// resyncCheckpoint is how much of a stale leg a resync covers between two
// saves of its cursor.
const resyncCheckpoint = 64 << 20

// ResyncOptions tune Volume.Resync.
type ResyncOptions struct {
	// Legs are the legs to bring back; default (nil) every online leg that
	// is stale.
	Legs []int
	// Rereads is how many times a failing block is read again. Default 0.
	Rereads int
	// Progress, if not nil, is called after each chunk with the blocks of
	// the stale ranges done and in all (every leg together).
	Progress func(done, total int64)
}

// ResyncReport counts what Resync did.
type ResyncReport struct {
	Legs []int // the legs resynced
	// Blocks are the stale blocks looked at; Copied those written to a
	// leg; Failed those no leg holds a verified copy of (still stale).
	Blocks, Copied, Failed int64
	// BytesRead counts the bytes read (the verified copy and the stale
	// leg's), BytesWritten those written to the stale legs.
	BytesRead, BytesWritten int64
	// Resumed: a leg's resync continued an interrupted one.
	Resumed bool
}

// Resync brings the stale legs of a mirrored volume back (see above). It
// fails on a volume without mirror legs, on one opened read-only, and when
// a leg goes offline while it runs (the leg stays stale; run Resync again
// once it is back).
func (v *Volume) Resync(ctx context.Context, opt ResyncOptions) (ResyncReport, error) {
	var rep ResyncReport
	done, err := v.enter()
	if err != nil {
		return rep, err
	}
	defer done()
	md := v.mirror
	switch {
	case md == nil:
		return rep, errors.New("blockdev: resync: the volume has no mirror legs")
	case v.opts.ReadOnly:
		return rep, fmt.Errorf("blockdev: resync: %w", device.ErrReadOnly)
	}
	if err := v.keyedWritable("resync"); err != nil {
		return rep, err
	}
	var todo []*mleg
	for _, l := range md.legs {
		if (opt.Legs == nil && l.stale.Load() && !l.offline.Load()) || slices.Contains(opt.Legs, l.i) {
			if l.offline.Load() {
				return rep, &LegError{Leg: l.i, Name: l.name, Err: fmt.Errorf("resync: %w", ErrLegOffline)}
			}
			todo = append(todo, l)
		}
	}
	var total int64
	sets := make([][]store.StaleRange, len(todo))
	for k, l := range todo {
		md.mu.RLock()
		if l.rec.All {
			sets[k] = []store.StaleRange{{LBA: 0, N: v.blocks}}
		} else {
			sets[k] = slices.Clone(l.rec.Ranges)
		}
		md.mu.RUnlock()
		for _, r := range sets[k] {
			total += r.N
		}
	}
	var prog int64
	for k, l := range todo {
		rep.Legs = append(rep.Legs, l.i)
		if err := v.resyncLeg(ctx, l, sets[k], opt, &rep, &prog, total); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// resyncCursor names the cursor of a resync of leg l over the stale set
// ranges: a different set starts afresh.
func resyncCursor(l *mleg, ranges []store.StaleRange) string {
	h := fnv.New64a()
	h.Write([]byte(l.name))
	for _, r := range ranges {
		h.Write(strconv.AppendInt(strconv.AppendInt(nil, r.LBA, 10), r.N, 10))
	}
	return "blockdev.resync." + strconv.Itoa(l.i) + "." + strconv.FormatUint(h.Sum64(), 16)
}

// resyncLeg resyncs leg l over ranges (see above).
func (v *Volume) resyncLeg(ctx context.Context, l *mleg, ranges []store.StaleRange, opt ResyncOptions, rep *ResyncReport, prog *int64, total int64) error {
	md := v.mirror
	bs := int64(v.bs)
	name := resyncCursor(l, ranges)
	var from int64
	if c, err := v.tup.ScrubCursor(name); err == nil && c.Pass == 0 {
		from = c.Next
		rep.Resumed = from > 0
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("blockdev: resync of leg %d: %w", l.i, err)
	}
	started := time.Now().UTC()
	data := device.AlignedBuffer(v.chunk * v.bs)
	theirs := device.AlignedBuffer(v.chunk * v.bs)
	sc := v.getScratch()
	defer v.putScratch(sc)
	req := v.request()
	req.ctx, req.rereads, req.zero, req.storeTuples, req.record = ctx, opt.Rereads, true, true, req.repair == repairWrite
	var failed store.Leg // the blocks left stale
	var sinceSave int64
	save := func(next int64) error {
		if err := l.dev.Sync(); err != nil {
			md.failed(l, 0, v.blocks, err)
			return &LegError{Leg: l.i, Name: l.name, Err: err}
		}
		return v.tup.SetScrubCursor(name, store.ScrubCursor{Next: next, Started: started, Updated: time.Now().UTC()}, true)
	}
	for _, r := range ranges {
		for b := max(r.LBA, from); b < r.LBA+r.N; {
			if err := ctx.Err(); err != nil {
				return err
			}
			if l.offline.Load() {
				return &LegError{Leg: l.i, Name: l.name, Err: fmt.Errorf("resync: went offline: %w", ErrLegOffline)}
			}
			n := int(min(int64(v.chunk), r.LBA+r.N-b))
			id := v.locks.lock(b, b+int64(n), false)
			err := v.resyncChunk(l, b, n, data, theirs, sc, req, rep, &failed)
			v.locks.unlock(id)
			if err != nil {
				return err
			}
			b += int64(n)
			*prog += int64(n)
			if opt.Progress != nil {
				opt.Progress(*prog, total)
			}
			if sinceSave += int64(n) * bs; sinceSave >= resyncCheckpoint {
				if err := save(b); err != nil {
					return err
				}
				sinceSave = 0
			}
		}
	}
	if err := save(v.blocks); err != nil {
		return err
	}
	// The leg holds every block fresh but those that failed.
	md.mu.Lock()
	unchanged := !l.offline.Load()
	if unchanged {
		l.rec.All, l.rec.Ranges, l.rec.StaleSince = failed.All, failed.Ranges, failed.StaleSince
		l.stale.Store(l.rec.Stale())
		md.dirty = true
	}
	md.mu.Unlock()
	if !unchanged {
		return &LegError{Leg: l.i, Name: l.name, Err: fmt.Errorf("resync: went offline: %w", ErrLegOffline)}
	}
	if err := md.persistStates(); err != nil {
		return err
	}
	return v.tup.SetScrubCursor(name, store.ScrubCursor{Next: 0, Pass: 1, Started: started, Updated: time.Now().UTC()}, true)
}

// resyncChunk resyncs the n blocks at lba of leg l: the verified copy into
// data, the leg's into theirs, the blocks that differ written to the leg.
// Caller holds a shared lock of the blocks.
func (v *Volume) resyncChunk(l *mleg, lba int64, n int, data, theirs []byte, sc *scratch, req readReq, rep *ResyncReport, failed *store.Leg) error {
	bs := v.bs
	if _, err := v.verifyRun(lba, n, data[:n*bs], sc, req); err != nil {
		return err
	}
	rep.Blocks += int64(n)
	rep.BytesRead += int64(n * bs)
	bad := map[int64]bool{}
	for _, p := range sc.probs {
		if !p.Passes() {
			bad[p.LBA] = true
		}
	}
	readErr := readDevice(l.dev, theirs[:n*bs], lba*int64(bs), false)
	if readErr == nil {
		rep.BytesRead += int64(n * bs)
	}
	for i := 0; i < n; {
		b := lba + int64(i)
		if bad[b] {
			failed.AddStale(b, 1, time.Now())
			rep.Failed++
			i++
			continue
		}
		if readErr == nil && bytes.Equal(data[i*bs:(i+1)*bs], theirs[i*bs:(i+1)*bs]) {
			i++
			continue
		}
		// A run of blocks to copy.
		j := i + 1
		for j < n && !bad[lba+int64(j)] && (readErr != nil || !bytes.Equal(data[j*bs:(j+1)*bs], theirs[j*bs:(j+1)*bs])) {
			j++
		}
		if _, err := l.dev.WriteAt(data[i*bs:j*bs], b*int64(bs)); err != nil {
			v.mirror.failed(l, b, int64(j-i), err)
			return &LegError{Leg: l.i, Name: l.name, Err: fmt.Errorf("resync: %w", err)}
		}
		rep.Copied += int64(j - i)
		rep.BytesWritten += int64((j - i) * bs)
		i = j
	}
	return nil
}
