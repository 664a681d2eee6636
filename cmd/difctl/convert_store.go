package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// runConvertStore converts to or from a store-backed image: an export of
// a protected image's data and stored tuples to an interleaved image or a
// DIX pair, or an import of one of those into a new protected image.
func runConvertStore(ctx context.Context, opts convertOptions, stdout, stderr io.Writer) error {
	if opts.From == formStore {
		return runExport(ctx, opts, stdout, stderr)
	}
	if opts.Key != (keyFlags{}) {
		return usageErrorf("convert --to store does not create keyed volumes: import without a key, or protect the data with protect --key-file")
	}
	return runImport(ctx, opts, stdout, stderr)
}

// byteProgress turns the (done, total) callbacks of the library, which
// start again from 0 for each pass, into progress increments.
func byteProgress(prog progress) func(done, total int64) {
	var last int64
	return func(done, _ int64) {
		if done < last {
			last = 0
		}
		prog.Add(done - last)
		last = done
	}
}

// runExport writes a protected image, with the tuples of its store, as an
// interleaved image or a DIX pair.
func runExport(ctx context.Context, opts convertOptions, stdout, stderr io.Writer) error {
	image := opts.Inputs[0]
	url := storeURL(image, opts.Store)
	if err := checkDistinct(opts.Inputs, opts.Outputs); err != nil {
		return err
	}
	v, err := openVolume(ctx, image, url, true, opts.Key)
	if err != nil {
		return err
	}
	defer v.Close()
	outs, err := createOutputs(opts.Outputs)
	if err != nil {
		return err
	}
	defer outs.discard()
	out := newOutput(stdout, opts.JSON)
	f := v.format()
	fw := newFindings(out, f)
	prog := newProgress(stderr, opts.Quiet, v.vol.Size(), "convert "+image)
	t0 := time.Now()
	dst := blockdev.ExportDest{Data: outs.files[0]}
	if opts.To == formDIX {
		dst.Meta = outs.files[1]
	}
	rep, err := blockdev.ExportVolume(ctx, v.vol, dst, blockdev.ExportOptions{
		Force: opts.Force, OnProblem: fw.report, Progress: byteProgress(prog),
	})
	prog.Finish()
	var ie *blockdev.IntegrityError
	switch {
	case err != nil && ctx.Err() != nil:
		return interrupted(ctx, rep.Failed)
	case err != nil && !errors.As(err, &ie):
		return fmt.Errorf("convert %s: %w", image, err)
	}
	keep := rep.Failed == 0 || opts.Force
	if keep {
		if err := outs.commit(); err != nil {
			return err
		}
	}
	format := f.WithLayout(dif.Interleaved).String()
	serr := fw.summary(&summaryRecord{Command: "convert", Image: image, Store: url, Format: format, KeyedCheck: keyedState(v.vol)}, rep.RunStats, time.Since(t0))
	if serr != nil && !errors.Is(serr, dif.ErrIntegrity) {
		return serr
	}
	if !keep {
		return notConverted(image, rep.RunStats)
	}
	rec := &convertRecord{From: opts.From, To: opts.To, Format: format, Inputs: opts.Inputs, Outputs: opts.Outputs,
		Store: url, Blocks: rep.Blocks, Bytes: rep.Bytes}
	if err := emitConvert(out, rec); err != nil {
		return err
	}
	return convertedFailing(image, rep.RunStats)
}

// emitConvert writes the convert record, or its line of text.
func emitConvert(out *output, rec *convertRecord) error {
	if out.json {
		return out.emit(rec)
	}
	from, to := strings.Join(rec.Inputs, " + "), strings.Join(rec.Outputs, " + ")
	switch {
	case rec.From == formStore:
		from += " (tuples in " + rec.Store + ")"
	case rec.To == formStore:
		to += " (tuples in " + rec.Store + ")"
	}
	_, err := fmt.Fprintf(out.w, "converted %d blocks of %s from %s %s to %s %s\n", rec.Blocks, rec.Format, rec.From, from, rec.To, to)
	return err
}

// importTargetError explains why the output of an import cannot be
// written.
func importTargetError(outImg, url string, err error) error {
	var te *blockdev.ImportTargetError
	switch {
	case errors.Is(err, blockdev.ErrVolumeExists):
		return usageErrorf("%s holds a protected image already: convert to a new image, or use another --store", url)
	case errors.Is(err, blockdev.ErrImportTargetExists):
		return usageErrorf("%s exists: converting to a store creates a new image (remove it, or choose another name)", outImg)
	case errors.Is(err, blockdev.ErrImportTargetGone):
		return fmt.Errorf("%s: the import into it is in progress in %s, but the image is gone: %w (delete %s to start again)", outImg, url, unwrapPath(err), url)
	case errors.As(err, &te) && te.Op == "store":
		return volumeError(outImg, url, te.Err)
	case errors.As(err, &te) && te.Op == "create":
		return fmt.Errorf("create %s: %w", outImg, te.Err)
	case errors.As(err, &te):
		return te.Err
	}
	return err
}

// importable checks that a store can keep the PI of format f with params p.
func importable(f dif.Format, p dif.Params) error {
	switch {
	case f.Type() == dif.Type0:
		return usageErrorf("format %s is type0: no protection information to import", f.WithLayout(dif.Interleaved))
	case f.MetadataSize() != f.TupleSize():
		return usageErrorf("format %s keeps %d bytes of metadata per block; a store keeps only the %d-byte tuple (convert to interleaved or dix instead)",
			f.WithLayout(dif.Interleaved), f.MetadataSize(), f.TupleSize())
	case p.AppTag == 0xffff:
		return usageErrorf("--app-tag 0xffff is the escape value: blocks carrying it are never checked")
	}
	return nil
}

// newStore is a store opened, and created if need be, for a command that
// may have to remove it again when it kept nothing.
type newStore struct {
	kv      store.KV
	dir     string // the store's directory; "" for other backends
	existed bool   // the directory was there before
	open    bool
}

func openNewStore(image, url string) (*newStore, error) {
	ns := &newStore{dir: storePath(url)}
	if ns.dir != "" {
		_, err := os.Stat(ns.dir)
		ns.existed = err == nil
	}
	kv, err := openStore(image, url, storeCreate)
	if err != nil {
		return nil, err
	}
	ns.kv, ns.open = kv, true
	return ns, nil
}

// remove closes the store and removes its directory if this command
// created it.
func (ns *newStore) remove() {
	if !ns.existed && ns.dir != "" {
		ns.close()
		os.RemoveAll(ns.dir)
	}
}

func (ns *newStore) close() {
	if ns.open {
		ns.kv.Close()
		ns.open = false
	}
}

// runImport creates a protected image from an interleaved image or a DIX
// pair: the data goes to the new image, the tuples, as the input stores
// them, to its store.
func runImport(ctx context.Context, opts convertOptions, stdout, stderr io.Writer) error {
	outImg := opts.Outputs[0]
	url := storeURL(outImg, opts.Store)
	im, err := openConvertInput(opts)
	if err != nil {
		return err
	}
	defer im.Close()
	f := im.f
	if err := importable(f, opts.Params); err != nil {
		return err
	}
	size := im.blocks() * int64(f.BlockSize())

	// The store: new, or holding the import that this command continues.
	ns, err := openNewStore(outImg, url)
	if err != nil {
		return err
	}
	defer ns.close()
	kv := ns.kv
	tgt, err := blockdev.OpenImportTarget(kv, outImg, size, blockdev.ImportTargetOptions{
		OpenDevice: func(p string) (*device.File, error) { return openDevice(p, false) },
	})
	if err != nil {
		return importTargetError(outImg, url, err)
	}
	defer tgt.Close()
	resume := tgt.Resume

	out := newOutput(stdout, opts.JSON)
	fw := newFindings(out, f)
	total := size
	if !opts.Force && !resume {
		total *= 2 // a verification pass first
	}
	prog := newProgress(stderr, opts.Quiet, total, "convert "+im.name())
	t0 := time.Now()
	vol, rep, err := tgt.Import(ctx, im.src, kv, blockdev.ImportOptions{
		Options: blockdev.Options{DeviceID: deviceID(outImg)},
		Force:   opts.Force, Tool: toolName, OnProblem: fw.report, Progress: byteProgress(prog),
	})
	prog.Finish()
	if tgt.Discarded() {
		ns.remove() // a store created for an import that kept nothing
	}
	var ie *blockdev.IntegrityError
	var mm *blockdev.MismatchError
	switch {
	case err != nil && !tgt.Discarded():
		if !errors.As(err, &mm) {
			fmt.Fprintf(stderr, "difctl: %s: conversion stopped; run the same command again to resume\n", outImg)
		}
	case errors.As(err, &ie) && ctx.Err() == nil:
		if serr := fw.summary(&summaryRecord{Command: "convert", Image: im.path, Metadata: im.meta, Format: f.WithLayout(dif.Interleaved).String()}, rep.RunStats, time.Since(t0)); serr != nil && !errors.Is(serr, dif.ErrIntegrity) {
			return serr
		}
		return notConverted(im.name(), rep.RunStats)
	}
	switch {
	case err != nil && ctx.Err() != nil:
		var failed int64
		if rep != nil {
			failed = rep.Failed
		}
		return interrupted(ctx, failed)
	case errors.As(err, &mm):
		return fmt.Errorf("%s: the import in progress in %s has another %s (%s, not %s): give the same flags, or delete %s and %s to start again",
			outImg, url, mm.Field, unquote(mm.Stored), unquote(mm.Given), outImg, url)
	case err != nil:
		return fmt.Errorf("convert %s: %w", im.name(), err)
	}
	if err := vol.Close(); err != nil {
		return fmt.Errorf("%s: %w", outImg, err)
	}
	format := f.WithLayout(dif.Interleaved).String()
	serr := fw.summary(&summaryRecord{Command: "convert", Image: im.path, Metadata: im.meta, Format: format, Start: rep.Start}, rep.RunStats, time.Since(t0))
	if serr != nil && !errors.Is(serr, dif.ErrIntegrity) {
		return serr
	}
	rec := &convertRecord{From: opts.From, To: opts.To, Format: format, Inputs: opts.Inputs, Outputs: opts.Outputs,
		Store: url, Blocks: im.blocks(), Bytes: rep.Bytes}
	if err := emitConvert(out, rec); err != nil {
		return err
	}
	return convertedFailing(im.name(), rep.RunStats)
}
