package blockdev

import (
	"context"
	"errors"
	"fmt"
)

// Parity computed in protect's pass. A volume created with
// CreateOptions.Parity has its parity added before protect reads the
// image, and protect reads the image into the windows of a parity pass
// (whole interleave groups) instead of its own buffer: when a window's
// blocks are all read (or are holes, which count as zeros), its stripes
// are encoded from the very bytes their tuples were generated from, and
// their parity written, so the image is read once for both. Nothing is
// verified: protect defines the tuples by that data.
//
// Crash safety is ComputeParity's: each window's stripes go under parity
// intents (one unsynced commit a window; an intent matters only if the
// parity file's sync fails, and an intent lost in a crash leaves a stripe
// with no checksums, whose parity is never used), and their checksums are
// committed only by the Sync of a checkpoint, after the checkpoint made
// the tuples of every block read so far durable and the Sync synced the
// parity file. A crash before that leaves the stripes without parity:
// protect resumed computes the windows it reads again, and ComputeParity
// (which `difctl protect --parity` runs after protect) those it does not.

// protectParity places protect's reads in the windows of a parity pass.
// Blocks before the first window boundary at or after where protect
// started (a resumed protect) are not placed: their stripes are left to
// ComputeParity.
type protectParity struct {
	*parityPass
	s0, s1 int64 // the current window's stripes
	b0, b1 int64 // its blocks
	k      int64
}

// newProtectParity returns the parity pass of protect starting at block
// next, or nil if the volume has no parity, or if a group of its layout
// does not fit in a window (then ComputeParity computes it afterwards).
func (v *Volume) newProtectParity(next int64) *protectParity {
	if v.par == nil {
		return nil
	}
	pp := v.par.newPass()
	if !pp.groups {
		return nil
	}
	k := int64(v.par.l.DataShards())
	s0 := (next + pp.win*k - 1) / (pp.win * k) * pp.win
	p := &protectParity{parityPass: pp, k: k}
	p.start(s0)
	return p
}

// start makes the window of stripes from s0 the current one.
func (p *protectParity) start(s0 int64) {
	l := p.pv.l
	p.s0 = min(s0, l.Stripes())
	p.s1 = p.window(p.s0)
	p.b0 = min(p.s0*p.k, l.Blocks())
	p.b1 = min(p.s1*p.k, l.Blocks())
}

// buf returns where protect reads up to n blocks from pos, and how many:
// the current window's place for them (never past its end), or nil (read
// into protect's own buffer) for blocks before the first window.
func (p *protectParity) buf(pos int64, n int) ([]byte, int) {
	if pos < p.b0 {
		return nil, int(min(int64(n), p.b0-pos))
	}
	bs := int64(p.pv.bs)
	n = int(min(int64(n), p.b1-pos))
	return p.data[(pos-p.b0)*bs : (pos-p.b0+int64(n))*bs], n
}

// done tells that protect has the blocks up to pos in the window: it
// encodes the window once they are all there.
func (p *protectParity) done(pos int64) error {
	if pos == p.b1 && p.b0 < p.b1 {
		return p.flush()
	}
	return nil
}

// skip tells that blocks [pos, end) are holes, left unwritten: zeros in
// the windows, which are encoded as they fill.
func (p *protectParity) skip(pos, end int64) error {
	bs := int64(p.pv.bs)
	for pos = max(pos, p.b0); pos < end && p.b0 < p.b1; {
		e := min(end, p.b1)
		clear(p.data[(pos-p.b0)*bs : (e-p.b0)*bs])
		pos = e
		if err := p.done(pos); err != nil {
			return err
		}
	}
	return nil
}

// flush encodes the current window's stripes that have no parity yet,
// writes their parity and records their checksums (committed by the next
// sync), then moves to the next window.
func (p *protectParity) flush() error {
	pv := p.pv
	n := int(p.s1 - p.s0)
	s := pv.v.stg
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	todo, anyTodo, err := p.todo(p.s0, n)
	if err != nil {
		return err
	}
	if anyTodo {
		if err := p.mark(p.s0, todo, false); err != nil {
			return err
		}
		good := make([]bool, n)
		for i := range good {
			good[i] = true
		}
		b0, bs := p.b0, pv.bs
		pv.mu.Lock()
		err = p.encode(p.s0, todo, good, func(b int64, _, _ int) int { return int(b-b0) * bs })
		pv.mu.Unlock()
		if err != nil {
			return err
		}
	}
	p.start(p.s1)
	return nil
}

// createParity gives a volume being created the parity spec describes,
// before protect: added, or, for a resumed protect of a volume that has
// it already, opened (through Options.OpenParity), as long as it is the
// same k+m, depth and file.
func (v *Volume) createParity(ctx context.Context, spec ParitySpec) error {
	cfg, has, err := v.tup.Parity()
	if err != nil {
		return fmt.Errorf("blockdev: create volume %q: %w", v.opts.Name, err)
	}
	if !has {
		return v.AddParity(spec)
	}
	l, err := ParityLayout(spec, v.bs, v.blocks)
	if err != nil {
		return fmt.Errorf("blockdev: create volume %q: %w", v.opts.Name, err)
	}
	if cfg.Data != spec.Data || cfg.Parity != spec.Parity || cfg.Depth != l.Depth() || cfg.Path != spec.Path {
		return fmt.Errorf("blockdev: create volume %q: %w", v.opts.Name,
			errors.New("resuming with other parity than it was started with (remove the parity first)"))
	}
	return v.openParity(ctx)
}
