package blockdev

import (
	"errors"
	"fmt"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/check"
	"github.com/difctl/difctl/store"
)

// The write path of a Volume: WriteAt (generate the tuples, verify the
// edge blocks, stage), and Discard. Staging, flushes, syncs and folds are
// in staging.go.

// generate computes the tuples (and sums) of n blocks of data starting at
// block lba, one sub-chunk at a time; dif's GenerateSums computes the sums
// in the same pass as the guards.
func (v *Volume) generate(data []byte, lba int64, n int, tuples []byte, sums []uint32) error {
	bs, ts := v.bs, v.ts
	sub := max(1, subChunk/bs)
	for i := 0; i < n; i += sub {
		k := min(sub, n-i)
		blocks, tups, p := data[i*bs:(i+k)*bs], tuples[i*ts:(i+k)*ts], v.params(lba+int64(i))
		var err error
		if v.sums {
			err = v.f.GenerateSums(blocks, tups, sums[i:i+k], p)
		} else {
			err = v.f.Generate(blocks, tups, p)
		}
		if err != nil {
			return fmt.Errorf("blockdev: generate: %w", err)
		}
	}
	return nil
}

// readEdge reads and verifies the block lba into buf for a partial write.
// It refuses (with the integrity error) a block that fails verification,
// unless Options.RewriteBadBlocks.
func (v *Volume) readEdge(buf []byte, lba int64, sc *scratch) error {
	req := v.request()
	req.zero = true
	if _, err := v.verifyRun(lba, 1, buf, sc, req); err != nil {
		return err
	}
	_, err := runError("write", sc.probs)
	var ie *IntegrityError
	if err != nil && v.opts.RewriteBadBlocks && errors.As(err, &ie) {
		return nil
	}
	return err
}

// WriteAt writes len(p) bytes at off, generating the tuples and sector
// checksums of every block it touches. A partial block at either end is
// read and verified first, then modified and written whole; if it fails
// verification the write is refused with an *IntegrityError and nothing is
// written (see Options.RewriteBadBlocks). Whole blocks are always replaced.
//
// WriteAt returns once the data is staged; it is durable after Sync (see
// the package documentation for what a crash before then may leave).
func (v *Volume) WriteAt(p []byte, off int64) (int, error) {
	done, err := v.enter()
	if err != nil {
		return 0, err
	}
	defer done()
	if v.opts.ReadOnly {
		return 0, fmt.Errorf("blockdev: write to volume %q: %w", v.opts.Name, device.ErrReadOnly)
	}
	if err := v.keyedWritable("write"); err != nil {
		return 0, err
	}
	if err := device.CheckRange("write", off, int64(len(p)), v.Size()); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	bs := int64(v.bs)
	b0, b1 := off/bs, (off+int64(len(p))+bs-1)/bs
	id := v.locks.lock(b0, b1, true)
	defer v.locks.unlock(id)
	sc := v.getScratch()
	defer v.putScratch(sc)

	end := off + int64(len(p))
	headPartial := off%bs != 0 || (b1-b0 == 1 && end%bs != 0)
	tailPartial := b1-b0 > 1 && end%bs != 0
	// Read and verify the partial blocks before anything is staged.
	if headPartial {
		if err := v.readEdge(sc.head, b0, sc); err != nil {
			return 0, err
		}
	}
	if tailPartial {
		if err := v.readEdge(sc.tail, b1-1, sc); err != nil {
			return 0, err
		}
	}
	i := 0 // bytes of p consumed
	lba := b0
	if headPartial {
		inb := int(off % bs)
		i = copy(sc.head[inb:], p)
		if err := v.stagePiece(sc.head, nil, lba, 1, sc); err != nil {
			return 0, err
		}
		lba++
	}
	piece := min(v.chunk, v.stg.batchCap)
	if v.tags != nil {
		piece = min(piece, max(1, keyedWritePiece/v.bs))
	}
	for len(p)-i >= v.bs {
		n := min((len(p)-i)/v.bs, piece)
		if err := v.stagePiece(p[i:i+n*v.bs], p[i:i+n*v.bs], lba, n, sc); err != nil {
			return i, err
		}
		i += n * v.bs
		lba += int64(n)
	}
	if i < len(p) {
		copy(sc.tail, p[i:])
		if err := v.stagePiece(sc.tail, nil, lba, 1, sc); err != nil {
			return i, err
		}
	}
	v.st.written.Add(b1 - b0)
	return len(p), nil
}

// stagePiece generates the tuples and sums of the n blocks of data at lba,
// and a keyed volume's tags, and stages them. caller is data when it is
// the caller's buffer (nil for a partial block, read and merged in the
// scratch): a keyed volume then computes all of them from one private copy
// (keyedWriteCopy), staged as it is. Caller holds the write's range lock;
// the scratch's overlay buffers are free (loadRun is done).
func (v *Volume) stagePiece(data, caller []byte, lba int64, n int, sc *scratch) error {
	tuples, sums, tags := sc.ovTuples, sc.ovSums, sc.ovTags
	if v.tags != nil && caller != nil {
		// The tuples and tags of a keyed volume are computed from one
		// private copy, staged as it is (see read_keyed.go).
		data = sc.keyedWriteCopy(data)
	}
	if err := v.generate(data, lba, n, tuples, sums); err != nil {
		return err
	}
	if v.tags != nil {
		if testHookKeyedWrite != nil && caller != nil {
			testHookKeyedWrite(caller)
		}
		if err := v.stageTags(tags, lba, n, data); err != nil {
			return err
		}
	}
	return v.stg.stage(lba, n, data, tuples, sums, tags)
}

// Discard marks the blocks of [off, off+n) discarded: they read as zeros
// afterwards, without error. off and n must be multiples of the block size
// (ErrUnaligned). Since an unwritten block must be zeros on the device (see
// ErrUnwrittenData), the range is discarded on the device when it is a
// Discarder (a hole punched in an image, zeroes written on a block device
// that can unmap them) and written with zeros otherwise. Discard syncs the
// volume first and makes the discard durable before it returns.
//
// Crash consistency: each piece of the range is first recorded as an
// intent whose tuples are those of zero blocks, then zeroed on the device
// and synced, then marked unwritten in the store with the intent dropped,
// in one synced commit. A crash in between leaves each block with its old
// data (recovery keeps its tuple) or zeros (recovery commits the zero
// block's tuple), never failing verification.
func (v *Volume) Discard(off, n int64) error {
	done, err := v.enter()
	if err != nil {
		return err
	}
	defer done()
	if v.opts.ReadOnly {
		return fmt.Errorf("blockdev: discard on volume %q: %w", v.opts.Name, device.ErrReadOnly)
	}
	if err := v.keyedWritable("discard"); err != nil {
		return err
	}
	if err := device.CheckRange("discard", off, n, v.Size()); err != nil {
		return err
	}
	if err := device.CheckAligned("discard", off, n, v.bs); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	bs := int64(v.bs)
	id := v.locks.lock(off/bs, (off+n)/bs, true)
	defer v.locks.unlock(id)
	v.stg.flushMu.Lock()
	defer v.stg.flushMu.Unlock()
	if err := v.stg.syncLocked(); err != nil {
		return err
	}
	return v.discardLocked(off/bs, n/bs)
}

// discardPiece is the most blocks one step of a discard covers (its intent
// holds their tuples: 16 MiB of 16-byte tuples).
const discardPiece = 1 << 20

// discardLocked discards blocks [lba, lba+n) piece by piece (see Discard).
// Caller holds flushMu and the range's lock, and has synced the volume.
func (v *Volume) discardLocked(lba, n int64) error {
	bs, ts := v.bs, v.ts
	piece := min(n, discardPiece)
	if v.par != nil {
		// The parity's update reads the old data of a piece at once.
		piece = min(piece, int64(v.stg.batchCap))
	}
	tuples := make([]byte, piece*int64(ts))
	var sums []uint32
	if v.sums {
		sums = make([]uint32, piece)
	}
	written := store.NewBitmap(int(piece))
	zb := max(1, len(check.Zeros)/bs) // blocks of check.Zeros
	for b := lba; b < lba+n; b += piece {
		k := min(piece, lba+n-b)
		kt := tuples[:k*int64(ts)]
		var ks []uint32
		if sums != nil {
			ks = sums[:k]
		}
		cnt, err := v.tup.ReadRange(b, kt, ks, written)
		if err != nil {
			return v.fail(err)
		}
		var iid store.IntentID
		var pu *parityUpdate
		if cnt > 0 {
			// The tuples of zero blocks, as the intent.
			for i := int64(0); i < k; i += int64(zb) {
				j := min(k, i+int64(zb))
				var s []uint32
				if ks != nil {
					s = ks[i:j]
				}
				if err := v.generate(check.Zeros[:(j-i)*int64(bs)], b+i, int(j-i), kt[i*int64(ts):j*int64(ts)], s); err != nil {
					return err
				}
			}
			x := v.tup.NewTxn()
			if iid, err = x.RecordIntent(b, kt, ks); err != nil {
				x.Abort()
				return v.fail(err)
			}
			if v.tags != nil {
				if err := v.discardIntent(x, iid, b, int(k)); err != nil {
					x.Abort()
					return v.fail(err)
				}
			}
			if v.par != nil {
				// Discarded blocks count as zeros in the parity.
				if pu, err = v.par.begin(x, []pchange{{lba: b, n: int(k)}}); err != nil {
					x.Abort()
					return v.fail(err)
				}
			}
			if err := x.Commit(true); err != nil {
				return v.fail(err)
			}
		}
		err = v.par.around(pu, func() error {
			if err := v.zeroDevice(b*int64(bs), k*int64(bs)); err != nil {
				return err
			}
			if err := v.dev.Sync(); err != nil {
				return err
			}
			x := v.tup.NewTxn()
			err := x.Discard(b, k)
			if err == nil && v.tags != nil {
				err = x.WriteTags(b, make([]store.KeyedTag, k))
			}
			if err == nil && cnt > 0 {
				err = x.DropIntent(iid)
			}
			if err != nil {
				x.Abort()
				return err
			}
			return x.Commit(true)
		})
		if err != nil {
			return v.fail(err)
		}
	}
	return nil
}

// zeroDevice makes the device's bytes [off, off+n) read as zeros: a
// discard where the device can (a Discarder guarantees zeros), otherwise
// writes of zeros.
func (v *Volume) zeroDevice(off, n int64) error {
	if d, ok := v.dev.(device.Discarder); ok {
		err := d.Discard(off, n)
		if err == nil || !errors.Is(err, errors.ErrUnsupported) {
			return err
		}
	}
	buf := device.AlignedBuffer(min(int(n), 1<<20))
	for pos := off; pos < off+n; {
		k := min(int64(len(buf)), off+n-pos)
		if _, err := v.dev.WriteAt(buf[:k], pos); err != nil {
			return err
		}
		pos += k
	}
	return nil
}
