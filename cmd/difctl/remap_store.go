package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/store"
)

// remapTestHook, from DIFCTL_TEST_REMAP ("chunk=N,delay=D"), makes a
// store-backed remap rewrite N blocks per store commit, sleep D before each
// and print a "remap-step LBA" line on stdout, so that a test can
// interrupt it part-way. Not for users.
func remapTestHook() (chunk int, delay time.Duration, ok bool) {
	s := os.Getenv("DIFCTL_TEST_REMAP")
	if s == "" {
		return 0, 0, false
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "chunk":
			chunk, _ = strconv.Atoi(v)
		case "delay":
			delay, _ = time.ParseDuration(v)
		}
	}
	return chunk, delay, true
}

// runRemapStore remaps the ref tags of a store-backed image: its stored
// tuples and its manifest's initial ref tag. The data is not touched.
func runRemapStore(ctx context.Context, opts remapOptions, stdout, stderr io.Writer) error {
	url := storeURL(opts.Image, opts.Store)
	if _, err := os.Stat(opts.Image); err != nil {
		return asOpenError(err)
	}
	var j *store.Journal
	st, err := openStoreTuples(opts.Image, url, storeWrite, func(kv store.KV) (t *store.Tuples, err error) {
		t, j, err = store.OpenJournaled(kv, blockdev.DefaultVolumeName, nil)
		return t, err
	})
	if err != nil {
		return err
	}
	defer st.Close()
	kv, m, f := st.kv, st.m, st.f
	dev, err := openDevice(opts.Image, true)
	if err != nil {
		return err
	}
	defer dev.Close()
	if err := checkImage(ctx, opts.Image, url, st.t, dev); err != nil {
		return err
	}
	bits := f.RefTagBits()
	switch {
	case opts.RefTagSet && opts.Params.RefTag != m.InitialRefTag && j == nil:
		return usageErrorf("--ref-tag %#x: %s has initial ref tag %#x in %s (leave --ref-tag out)", opts.Params.RefTag, opts.Image, m.InitialRefTag, url)
	case bits < 64 && opts.NewRefTag>>bits != 0:
		return usageErrorf("--new-ref-tag %#x does not fit the %d-bit ref tag of format %s", opts.NewRefTag, bits, displayFormat(m.Format))
	case j != nil && j.Op == store.OpRemap && j.To != opts.NewRefTag:
		return usageErrorf("%s: a remap to %#x is in progress: run difctl remap %s --new-ref-tag %#x to finish it first",
			opts.Image, j.To, opts.Image, j.To)
	}

	out := newOutput(stdout, opts.JSON)
	fw := newFindings(out, f)
	bs := int64(f.BlockSize())
	blocks := m.Blocks()
	key, err := opts.Key.load()
	if err != nil {
		return err
	}
	ropts := blockdev.RemapOptions{OnProblem: fw.report, Options: blockdev.Options{Rereads: blockdev.DefaultRereads, Key: key, Witness: opts.Key.witness()}}
	prog := newProgress(stderr, opts.Quiet, blocks*bs, "verify "+opts.Image)
	phase := "verify"
	var last, next int64
	chunk, delay, hook := remapTestHook()
	if hook {
		ropts.ChunkBlocks = chunk
	}
	ropts.Progress = func(ph string, done, total int64) {
		if ph != phase {
			prog.Finish()
			prog = newProgress(stderr, opts.Quiet, total*bs, "remap "+opts.Image)
			phase, last = ph, 0
		}
		prog.Add((done - last) * bs)
		last = done
		if ph == "remap" {
			next = done
			if hook && done < total {
				fmt.Fprintf(stdout, "remap-step %d\n", done)
				time.Sleep(delay)
			}
		}
	}
	t0 := time.Now()
	rep, err := blockdev.RemapVolume(ctx, dev, kv, opts.NewRefTag, ropts)
	prog.Finish()
	var ie *blockdev.IntegrityError
	switch {
	case err != nil && ctx.Err() != nil:
		if phase == "remap" || rep != nil && rep.Resumed {
			fmt.Fprintf(stderr, "difctl: %s: remap stopped at LBA %d of %d; run difctl remap %s --new-ref-tag %#x again to finish (until then the image cannot be opened)\n",
				opts.Image, next, blocks, opts.Image, opts.NewRefTag)
		}
		var failed int64
		if rep != nil {
			failed = rep.Verified.Failed
		}
		return interrupted(ctx, failed)
	case errors.As(err, &ie):
		if serr := fw.summary(&summaryRecord{Command: "remap", Image: opts.Image, Store: url, Format: displayFormat(m.Format)}, rep.Verified, time.Since(t0)); serr != nil && !isIntegrity(serr) {
			return serr
		}
		what := "nothing remapped"
		if rep.Resumed {
			what = fmt.Sprintf("the remap in progress (done up to LBA %d) is left as it is", rep.ResumedAt)
		}
		return &integrityError{msg: fmt.Sprintf("%s: %d of %d blocks failed verification with the old ref tags: %s", opts.Image, rep.Verified.Failed, rep.Verified.Blocks, what)}
	case err != nil:
		return volumeError(opts.Image, url, err)
	}
	rec := &remapRecord{Image: opts.Image, Store: url, Format: displayFormat(m.Format),
		OldRefTag: hexWidth(0, rep.From, bits), NewRefTag: hexWidth(0, rep.To, bits), Blocks: blocks,
		Rewritten: rep.Rewritten, Resumed: rep.Resumed, Nothing: rep.Nothing}
	if out.json {
		return out.emit(rec)
	}
	switch rep.Nothing {
	case blockdev.RemapNothingType3:
		_, err = fmt.Fprintf(out.w, "%s: format %s is type3: ref tags are not checked and do not follow the LBA, nothing to rewrite (%d blocks verified)\n",
			opts.Image, rec.Format, blocks)
	case blockdev.RemapNothingSame:
		_, err = fmt.Fprintf(out.w, "%s: the initial ref tag is 0x%s already: nothing to rewrite (%d blocks verified)\n", opts.Image, rec.NewRefTag, blocks)
	default:
		resumed := ""
		if rep.Resumed {
			resumed = fmt.Sprintf(", resumed at LBA %d", rep.ResumedAt)
		}
		_, err = fmt.Fprintf(out.w, "%s: remapped the ref tags of %d blocks (%s%s): block 0 from 0x%s to 0x%s, tuples in %s\n",
			opts.Image, blocks, rec.Format, resumed, rec.OldRefTag, rec.NewRefTag, url)
	}
	return err
}
