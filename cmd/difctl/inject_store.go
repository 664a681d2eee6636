package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// runInjectStore flips a bit of a store-backed image behind the volume's
// back: a data bit on the image itself, or a bit of the block's tuple in
// the store.
func runInjectStore(ctx context.Context, opts injectOptions, stdout, _ io.Writer) error {
	if opts.Field == dif.FieldMetadata {
		return usageErrorf("--field metadata: a store-backed image keeps only the tuple; use data, guard, app, ref or storage")
	}
	url := storeURL(opts.Image, opts.Store)
	st, err := openStoreTuples(opts.Image, url, storeWrite, nil)
	if err != nil {
		return err
	}
	defer st.Close()
	t, m, f := st.t, st.m, st.f
	f = f.WithLayout(dif.Separate)
	if err := checkLNAsStore(opts.LBA, t); err != nil {
		return err
	}
	dev, err := openDevice(opts.Image, opts.Field != dif.FieldData)
	if err != nil {
		return err
	}
	defer dev.Close()
	if err := checkImage(ctx, opts.Image, url, t, dev); err != nil {
		return err
	}
	bs := int64(f.BlockSize())
	data := make([]byte, bs)
	md := make([]byte, f.MetadataSize())
	written := store.NewBitmap(1)
	if _, err := dev.ReadAt(data, opts.LBA*bs); err != nil {
		return fmt.Errorf("read %s: %w", opts.Image, err)
	}
	var sums []uint32
	if m.SectorSums {
		sums = make([]uint32, 1)
	}
	if _, err := t.ReadRange(opts.LBA, md, sums, written); err != nil {
		return storeErr(url, err)
	}
	if opts.Field != dif.FieldData && !written.Has(0) {
		return usageErrorf("LBA %d is unwritten: it has no tuple to corrupt", opts.LBA)
	}
	before, _ := f.ReadTuple(data, md, 0)
	if err := f.Inject(data, md, 0, opts.Field, opts.Bit); err != nil {
		if errors.Is(err, dif.ErrParams) {
			return usageErrorf("--field %s --bit %d: %w", fieldName(opts.Field), opts.Bit, &restatedError{msg: difCause(err), err: err})
		}
		return err
	}
	after, _ := f.ReadTuple(data, md, 0)
	if opts.Field == dif.FieldData {
		if _, err := dev.WriteAt(data, opts.LBA*bs); err != nil {
			return fmt.Errorf("write %s: %w", opts.Image, err)
		}
		if err := dev.Sync(); err != nil {
			return fmt.Errorf("sync %s: %w", opts.Image, err)
		}
	} else if err := t.WriteRange(opts.LBA, md, sums, true); err != nil {
		return storeErr(url, err)
	}
	rec := &injectRecord{Image: opts.Image, Store: url, Format: displayFormat(m.Format), LBA: opts.LBA,
		Field: fieldName(opts.Field), Bit: opts.Bit,
		Before: tupleField(f, before, opts.Field), After: tupleField(f, after, opts.Field)}
	return emitInject(newOutput(stdout, opts.JSON), opts.Image, rec)
}

// checkLNAsStore refuses an LBA beyond the volume.
func checkLNAsStore(lba int64, t *store.Tuples) error { return checkLBAs(lba, 1, t.Blocks()) }
