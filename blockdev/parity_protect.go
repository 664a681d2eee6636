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

// protectParity places protect's reads in the windows of a parity pass,
// and encodes each full window on a goroutine of its own while protect
// reads the next into a second pass's window (the encode and the parity
// writes take a third of the pass's time on one core; there is another).
// Blocks before the first window boundary at or after where protect
// started (a resumed protect) are not placed: their stripes are left to
// ComputeParity.
type protectParity struct {
	passes  [2]*parityPass // protect fills passes[cur]; the other may be encoding
	cur     int
	s0, s1  int64 // the current window's stripes
	b0, b1  int64 // its blocks
	k       int64
	pending chan error // the other pass's encode, if one runs
}

// newProtectParity returns the parity pass of protect starting at block
// next, or nil if the volume has no parity, or if a group of its layout
// does not fit in a window (then ComputeParity computes it afterwards).
func (v *Volume) newProtectParity(next int64) *protectParity {
	if v.par == nil {
		return nil
	}
	p := &protectParity{passes: [2]*parityPass{v.par.newPass(), v.par.newPass()}, k: int64(v.par.l.DataShards())}
	pp := p.passes[0]
	if !pp.groups {
		return nil
	}
	for _, pp := range p.passes {
		pp.buffers()
	}
	p.start((next + pp.win*p.k - 1) / (pp.win * p.k) * pp.win)
	return p
}

// start makes the window of stripes from s0 the current one.
func (p *protectParity) start(s0 int64) {
	pp := p.passes[p.cur]
	l := pp.pv.l
	p.s0 = min(s0, l.Stripes())
	p.s1 = pp.window(p.s0)
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
	pp := p.passes[p.cur]
	bs := int64(pp.pv.bs)
	n = int(min(int64(n), p.b1-pos))
	return pp.data[(pos-p.b0)*bs : (pos-p.b0+int64(n))*bs], n
}

// done tells that protect has the blocks up to pos in the window: it
// hands the window to the encoder once they are all there.
func (p *protectParity) done(pos int64) error {
	if pos == p.b1 && p.b0 < p.b1 {
		return p.flush()
	}
	return nil
}

// skip tells that blocks [pos, end) are holes, left unwritten: zeros in
// the windows, which are encoded as they fill.
func (p *protectParity) skip(pos, end int64) error {
	for pos = max(pos, p.b0); pos < end && p.b0 < p.b1; {
		e := min(end, p.b1)
		bs := int64(p.passes[p.cur].pv.bs)
		clear(p.passes[p.cur].data[(pos-p.b0)*bs : (e-p.b0)*bs])
		pos = e
		if err := p.done(pos); err != nil {
			return err
		}
	}
	return nil
}

// flush waits for the other pass's encode, starts the current window's on
// a goroutine, and moves protect to the next window, in the other pass.
func (p *protectParity) flush() error {
	if err := p.wait(); err != nil {
		return err
	}
	pp, s0, n, b0 := p.passes[p.cur], p.s0, int(p.s1-p.s0), p.b0
	ch := make(chan error, 1)
	go func() { ch <- pp.encodeWindow(s0, n, b0) }()
	p.pending = ch
	p.cur ^= 1
	p.start(p.s1)
	return nil
}

// wait waits for the encode that runs, if one does, and returns its error.
func (p *protectParity) wait() error {
	if p.pending == nil {
		return nil
	}
	err := <-p.pending
	p.pending = nil
	return err
}

// encodeWindow encodes the n stripes from s0 that have no parity yet, whose
// blocks are in pp.data from block b0 on, writes their parity and records
// their checksums (committed by the next sync).
func (pp *parityPass) encodeWindow(s0 int64, n int, b0 int64) error {
	pv := pp.pv
	s := pv.v.stg
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	todo, anyTodo, err := pp.todo(s0, n)
	if err != nil || !anyTodo {
		return err
	}
	if err := pp.mark(s0, todo); err != nil {
		return err
	}
	good := make([]bool, n)
	for i := range good {
		good[i] = true
	}
	bs := pv.bs
	pv.mu.Lock()
	defer pv.mu.Unlock()
	return pp.encode(s0, todo, good, func(b int64, _, _ int) int { return int(b-b0) * bs })
}

// sync waits for the encode that runs, then syncs the parity file and
// commits the checksums of the stripes computed since the last sync
// (commitParity). Unlike a volume's Sync it leaves the image alone:
// protect only reads it.
func (p *protectParity) sync() error {
	if err := p.wait(); err != nil {
		return err
	}
	s := p.passes[0].pv.v.stg
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	return p.passes[0].pv.v.commitParity()
}

// report is what the pass computed.
func (p *protectParity) report() ParityReport {
	a, b := p.passes[0].rep, p.passes[1].rep
	return ParityReport{Computed: a.Computed + b.Computed, Recorded: a.Recorded + b.Recorded, Unprotected: a.Unprotected + b.Unprotected}
}

// release waits for the encode that runs, if one does, and returns the
// passes' buffers.
func (p *protectParity) release() {
	p.wait()
	for _, pp := range p.passes {
		pp.release()
	}
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
