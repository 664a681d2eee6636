package main

import (
	"context"
	"io"
	"time"

	"github.com/difctl/difctl/blockdev"
)

// runVerifyStore verifies a store-backed image against its stored tuples.
func runVerifyStore(ctx context.Context, opts verifyOptions, stdout, stderr io.Writer) error {
	url := storeURL(opts.Image, opts.Store)
	v, err := openVolume(ctx, opts.Image, url, true, opts.Key)
	if err != nil {
		return err
	}
	defer v.Close()
	start, count, err := opts.Range.bounds(v.vol.Blocks())
	if err != nil {
		return err
	}
	out := newOutput(stdout, opts.JSON)
	fw := newFindings(out, v.format())
	bs := int64(v.vol.BlockSize())
	prog := newProgress(stderr, opts.Quiet, count*bs, "verify "+opts.Image)
	t0 := time.Now()
	st, err := checkRange(ctx, v.vol, start, count, blockdev.CheckOptions{Rereads: blockdev.DefaultRereads}, prog, bs, fw.report)
	prog.Finish()
	if err != nil {
		if ctx.Err() != nil {
			return interrupted(ctx, st.Failed)
		}
		return storeFailure("verify "+opts.Image, url, err)
	}
	rec := &summaryRecord{
		Command: "verify", Image: opts.Image, Store: url, Format: displayFormat(v.format().String()), Start: start, KeyedCheck: keyedState(v.vol),
	}
	if err := checkSeal(v.vol, rec); err != nil {
		return storeFailure("verify "+opts.Image, url, err)
	}
	return fw.summary(rec, st, time.Since(t0))
}
