package main

import (
	"context"
	"fmt"
	"io"
	"os"
)

// writeChunk is the bytes of one WriteData call: whole blocks of every
// block size, so that only the first and the last block of a write are
// read back and checked.
const writeChunk = 1 << 20

// runWriteDevice writes into an NVMe namespace that carries PI: difctl
// generates the PI, the device checks it (nvme.Device.WriteData). The
// input is written in chunks of whole blocks from the first block
// boundary after the offset; a chunk the device refuses ends the write.
func runWriteDevice(ctx context.Context, opts writeOptions, stdout, stderr io.Writer) error {
	r := opts.Stdin
	if r == nil {
		r = eofReader{}
	}
	size := int64(-1)
	if opts.Input != "-" {
		f, err := os.Open(opts.Input)
		if err != nil {
			return err
		}
		defer f.Close()
		r, size = f, inputSize(f)
	}
	im, err := openDevicePI(opts.Image, opts.devParams, true)
	if err != nil {
		return err
	}
	defer im.Close()
	d := im.dev
	// The device checks the app tag difctl writes, whatever the mask a
	// check of it would use; the blocks a write covers in part are
	// checked before they are rewritten as verify checks them (their app
	// tag, the one being replaced, is not).
	p, check := opts.devParams, opts.devParams
	p.AppMask, check.AppMask = 0xffff, 0
	bs := int64(d.BlockSize())
	devSize := d.Blocks() * bs
	if opts.Offset > devSize || size >= 0 && opts.Offset+size > devSize {
		return usageErrorf("writing %d bytes at offset %d goes past the end of %s (%d bytes)", max(size, 0), opts.Offset, opts.Image, devSize)
	}
	prog := newProgress(stderr, opts.Quiet, size, "write "+opts.Image)
	buf := make([]byte, writeChunk)
	off := opts.Offset
	var werr error
	for werr == nil {
		if ctx.Err() != nil {
			werr = context.Cause(ctx)
			break
		}
		// The first chunk ends on a block boundary.
		want := len(buf)
		if first := int(off % bs); first != 0 {
			want -= first
		}
		n, rerr := io.ReadFull(r, buf[:want])
		if n > 0 {
			if off+int64(n) > devSize {
				werr = usageErrorf("input goes past the end of %s (%d bytes) at offset %d: the first %d bytes were written", opts.Image, devSize, off, off-opts.Offset)
				break
			}
			if err := d.WriteData(buf[:n], off, p, check); err != nil {
				werr = err
				break
			}
			off += int64(n)
			prog.Add(int64(n))
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			werr = fmt.Errorf("read %s: %w", displayName(opts.Input), unwrapPath(rerr))
		}
	}
	prog.Finish()
	if werr != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if isIntegrityErr(werr) {
			return &integrityError{msg: "write " + opts.Image, err: werr}
		}
		return fmt.Errorf("write %s: %w", opts.Image, werr)
	}
	// Passthrough writes bypass the page cache; a flush makes them
	// durable on a device with a volatile write cache.
	if err := im.dev.Flush(); err != nil {
		return fmt.Errorf("flush %s: %w", opts.Image, err)
	}
	out := newOutput(stdout, opts.JSON)
	rec := &writeRecord{Image: opts.Image, Input: opts.Input, Offset: opts.Offset, Bytes: off - opts.Offset}
	if out.json {
		return out.emit(rec)
	}
	_, err = fmt.Fprintf(out.w, "%s: wrote %d bytes at offset %d, with PI the device checked\n", opts.Image, rec.Bytes, rec.Offset)
	return err
}
