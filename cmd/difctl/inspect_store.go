package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// manifestRecord describes a store-backed image: its manifest, coverage and
// findings (inspect IMAGE).
type manifestRecord struct {
	header
	Image      string           `json:"image"`
	Store      string           `json:"store"`
	Volume     string           `json:"volume"`      // the volume's name in the store
	Format     string           `json:"format"`      // dif text form
	BlockSize  int              `json:"block_size"`  // data bytes per block
	TupleSize  int              `json:"tuple_size"`  // PI tuple bytes: 8 or 16
	SectorSums bool             `json:"sector_sums"` // a CRC-32C per block beside its tuple
	RefTag     string           `json:"ref_tag"`     // initial ref tag, hex
	AppTag     string           `json:"app_tag"`     // hex
	AppMask    string           `json:"app_mask"`    // hex
	DeviceSize int64            `json:"device_size"` // bytes
	DeviceID   string           `json:"device_id,omitempty"`
	Blocks     int64            `json:"blocks"`
	Written    int64            `json:"written"`           // blocks with a tuple
	Unwritten  int64            `json:"unwritten"`         // blocks never written or discarded
	Created    string           `json:"created,omitempty"` // RFC 3339
	Tool       string           `json:"tool,omitempty"`
	Schema     int              `json:"schema_version"`
	Findings   map[string]int64 `json:"findings"`             // findings by state: open, rechecked-ok, closed
	OpenByKind map[string]int64 `json:"open_by_kind"`         // open findings by kind
	ScrubNext  *int64           `json:"scrub_next,omitempty"` // the scrub cursor, if a scrub ran
	ScrubPass  *uint64          `json:"scrub_pass,omitempty"` // completed scrub passes
	ScrubAt    string           `json:"scrub_updated,omitempty"`
	Keyed      bool             `json:"keyed,omitempty"`       // a keyed volume
	KeyCheck   string           `json:"key_check,omitempty"`   // its key check value (the key is never stored)
	KeyedCheck string           `json:"keyed_check,omitempty"` // key-matches with --key-file/--key-env, skipped without
}

func (*manifestRecord) recordType() string { return "manifest" }

func runInspectStore(ctx context.Context, opts inspectOptions, stdout, stderr io.Writer) error {
	url := storeURL(opts.Image, opts.Store)
	st, err := openStoreTuples(opts.Image, url, storeRead, nil)
	if err != nil {
		return err
	}
	defer st.Close()
	t, m, f := st.t, st.m, st.f
	// The manifest must describe this image before anything is read by it.
	fi, err := os.Stat(opts.Image)
	if err != nil {
		return asOpenError(err)
	}
	size := fi.Size()
	var dev *device.File
	if !fi.Mode().IsRegular() {
		if dev, err = openDevice(opts.Image, true); err != nil {
			return err
		}
		defer dev.Close()
		size = dev.Size()
	}
	if err := checkIdentity(opts.Image, url, m, size); err != nil {
		return err
	}
	if dev == nil {
		if dev, err = openDevice(opts.Image, true); err != nil {
			return err
		}
		defer dev.Close()
	}
	if err := checkImage(ctx, opts.Image, url, t, dev); err != nil {
		return err
	}
	p := dif.Params{RefTag: m.InitialRefTag, AppTag: m.AppTag, AppMask: m.AppTagMask}
	out := newOutput(stdout, opts.JSON)
	vk, err := inspectKey(opts, t)
	if err != nil {
		return err
	}
	if opts.LBA >= 0 {
		return inspectStoreBlocks(ctx, opts, out, t, f, p, vk)
	}
	rec := &manifestRecord{Image: opts.Image, Store: url, Volume: t.Volume(), Format: displayFormat(m.Format),
		BlockSize: m.BlockSize, TupleSize: m.TupleSize, SectorSums: m.SectorSums,
		RefTag: hexWidth(0, m.InitialRefTag, f.RefTagBits()), AppTag: hexWidth(0, uint64(m.AppTag), 16), AppMask: hexWidth(0, uint64(m.AppTagMask), 16),
		DeviceSize: m.DeviceSize, DeviceID: m.DeviceID, Blocks: t.Blocks(), Tool: m.Tool, Schema: m.Schema,
		Findings: map[string]int64{}, OpenByKind: map[string]int64{},
		Keyed: m.Keyed(), KeyCheck: m.KeyCheck}
	if m.Keyed() {
		rec.KeyedCheck = keyedSkipped
		if vk != nil {
			rec.KeyedCheck = keyMatches
		}
	}
	if !m.Created.IsZero() {
		rec.Created = m.Created.UTC().Format(time.RFC3339)
	}
	// Coverage: count the written blocks, one stored page at a time (the
	// time is bounded by what the store holds, not the device size).
	w, err := t.Coverage(func() error {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return volumeError(opts.Image, url, err)
	}
	rec.Written = int64(w)
	rec.Unwritten = rec.Blocks - rec.Written
	for fd, err := range t.Findings(store.FindingQuery{}) {
		if err != nil {
			return storeErr(url, err)
		}
		rec.Findings[fd.State.String()]++
		if fd.State == store.FindingOpen {
			rec.OpenByKind[fd.Field]++
		}
	}
	if c, err := t.ScrubCursor(scrubName); err == nil {
		next, pass := c.Next, c.Pass
		rec.ScrubNext, rec.ScrubPass = &next, &pass
		if !c.Updated.IsZero() {
			rec.ScrubAt = c.Updated.UTC().Format(time.RFC3339)
		}
	}
	if out.json {
		return out.emit(rec)
	}
	tw := tabwriter.NewWriter(out.w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "image:\t%s\n", opts.Image)
	fmt.Fprintf(tw, "store:\t%s (volume %q, schema %d, created %s by %s)\n", url, rec.Volume, rec.Schema, orDash(rec.Created), orDash(printable(rec.Tool)))
	fmt.Fprintf(tw, "format:\t%s: %d-byte blocks, %s guard, type %d\n", rec.Format, rec.BlockSize, guardName(f.Guard()), f.Type())
	fmt.Fprintf(tw, "tags:\tinitial ref tag 0x%s, app tag 0x%s under mask 0x%s\n", rec.RefTag, rec.AppTag, rec.AppMask)
	sumText := "no"
	if rec.SectorSums {
		sumText = "yes (CRC-32C per block)"
	}
	fmt.Fprintf(tw, "sector sums:\t%s\n", sumText)
	if rec.Keyed {
		fmt.Fprintf(tw, "keyed:\t%s\n", keyedManifestText(rec))
	}
	fmt.Fprintf(tw, "device:\t%s (%d bytes)%s\n", formatBytes(rec.DeviceSize), rec.DeviceSize, map[bool]string{true: ", id " + printable(rec.DeviceID), false: ""}[rec.DeviceID != ""])
	pct := 0.0
	if rec.Blocks > 0 {
		pct = 100 * float64(rec.Written) / float64(rec.Blocks)
	}
	fmt.Fprintf(tw, "coverage:\t%d of %d blocks written (%.1f%%), %d unwritten\n", rec.Written, rec.Blocks, pct, rec.Unwritten)
	var kinds []string
	for _, k := range slices.Sorted(maps.Keys(rec.OpenByKind)) {
		kinds = append(kinds, fmt.Sprintf("%s %d", kindName(blockdev.Kind(k)), rec.OpenByKind[k]))
	}
	open := fmt.Sprintf("%d open", rec.Findings["open"])
	if len(kinds) > 0 {
		open += " (" + strings.Join(kinds, ", ") + ")"
	}
	fmt.Fprintf(tw, "findings:\t%s, %d rechecked-ok, %d closed\n", open, rec.Findings["rechecked-ok"], rec.Findings["closed"])
	if rec.ScrubNext != nil {
		fmt.Fprintf(tw, "scrub:\t%d passes complete, next block %d, updated %s\n", *rec.ScrubPass, *rec.ScrubNext, orDash(rec.ScrubAt))
	} else {
		fmt.Fprintf(tw, "scrub:\tnever run\n")
	}
	return tw.Flush()
}

// printable returns s as it is when it holds only printable characters,
// else quoted with its control characters escaped: a store's text fields
// (device id, tool) must not reach a terminal raw.
func printable(s string) string {
	q := strconv.QuoteToGraphic(s)
	if q[1:len(q)-1] == s {
		return s
	}
	return q
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// inspectStoreBlocks shows blocks of a store-backed image: the tuple in
// the store beside the one computed from the data on the image (read
// directly, not through the volume).
func inspectStoreBlocks(ctx context.Context, opts inspectOptions, out *output, t *store.Tuples, f dif.Format, p dif.Params, vk *blockdev.VolumeKey) error {
	start, count := opts.LBA, opts.Count
	if err := checkLBAs(start, count, t.Blocks()); err != nil {
		return err
	}
	dev, err := openDevice(opts.Image, true)
	if err != nil {
		return err
	}
	defer dev.Close()
	if err := checkIdentity(opts.Image, storeURL(opts.Image, opts.Store), t.Manifest(), dev.Size()); err != nil {
		return err
	}
	f = f.WithLayout(dif.Separate)
	data := make([]byte, f.BlockSize())
	md := make([]byte, f.MetadataSize())
	written := store.NewBitmap(1)
	tt := newTupleTable(out, f)
	for lba := start; lba < start+count; lba++ {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if _, err := dev.ReadAt(data, lba*int64(f.BlockSize())); err != nil {
			return fmt.Errorf("read %s at LBA %d: %w", opts.Image, lba, err)
		}
		written.Clear(0)
		if _, err := t.ReadRange(lba, md, nil, written); err != nil {
			return storeErr(storeURL(opts.Image, opts.Store), err)
		}
		rec, err := inspectBlock(f, data, md, runParams(f, p, lba))
		if err != nil {
			return err
		}
		rec.LBA = lba
		w := written.Has(0)
		rec.Written = &w
		if !w {
			rec.State = "unwritten"
			rec.Failed = []string{}
			if !isZeroBlock(data) {
				// An unwritten block must be zeros on the device.
				rec.State = "failed"
				rec.Failed = []string{string(blockdev.KindUnwrittenData)}
			}
		}
		if t.Keyed() {
			if err := inspectKeyed(rec, t, vk, lba, data, w); err != nil {
				return storeErr(storeURL(opts.Image, opts.Store), err)
			}
		}
		if err := tt.row(rec); err != nil {
			return err
		}
	}
	return tt.flush()
}
