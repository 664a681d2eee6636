package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
	"github.com/spf13/cobra"
)

// inspectOptions are the inputs of runInspect.
type inspectOptions struct {
	globalOptions
	Image string
	imageSpec
	LBA   int64 // first block to show; -1: no blocks, the overview
	Count int64 // blocks to show
	Store string
	// Control is --control, a server's control socket ("" for the
	// store's default); served, if not nil, the volume of difctl serve,
	// which runs the inspect for a client of it (control.go).
	Control string
	served  *served
}

// controlRequest is the request of an inspect run by the server holding
// the store (onServer).
func (o inspectOptions) controlRequest() (*controlRequest, error) {
	r, err := newControlRequest("inspect", o.Image, o.Store, o.Control, o.globalOptions)
	if err != nil {
		return nil, err
	}
	r.Inspect = &controlInspectArgs{LBA: o.LBA, Count: o.Count}
	return r, nil
}

// imageRecord describes an image with its own PI (inspect without --lba).
type imageRecord struct {
	header
	Image        string `json:"image"`
	Metadata     string `json:"metadata,omitempty"`
	Format       string `json:"format"`        // dif text form
	Layout       string `json:"layout"`        // interleaved or dix
	BlockSize    int    `json:"block_size"`    // data bytes per block
	MetadataSize int    `json:"metadata_size"` // metadata bytes per block
	TupleSize    int    `json:"tuple_size"`    // PI tuple bytes (8 or 16)
	Guard        int    `json:"guard"`         // guard bits: 16, 32 or 64
	PIType       int    `json:"pi_type"`       // 0 to 3
	PIPosition   string `json:"pi_position"`   // first or last
	Blocks       int64  `json:"blocks"`
	Bytes        int64  `json:"bytes"` // data bytes (blocks * block_size)
	// Device describes an NVMe namespace with PI (--device-pi).
	Device *devicePIRecord `json:"device,omitempty"`
}

// devicePIRecord is what inspect says of an NVMe namespace with PI.
type devicePIRecord struct {
	NamespaceID uint32 `json:"namespace_id"`
	// KernelIntegrity is the kernel's integrity profile of the block
	// device (/sys/block/NAME/integrity/format: T10-DIF-TYPE1-CRC, none,
	// ...), "" when the kernel has none to show.
	KernelIntegrity string `json:"kernel_integrity"`
}

func (*imageRecord) recordType() string { return "image" }

// tupleValues are the fields of a PI tuple as hex strings.
type tupleValues struct {
	Guard      string `json:"guard"`
	AppTag     string `json:"app_tag"`
	RefTag     string `json:"ref_tag"`
	StorageTag string `json:"storage_tag,omitempty"` // formats with a storage tag
}

// tupleRecord is one block's stored and computed tuples (inspect --lba).
type tupleRecord struct {
	header
	LBA      int64       `json:"lba"`
	State    string      `json:"state"`             // ok, escaped, unwritten, failed (or "unreadable")
	Stored   tupleValues `json:"stored"`            // as read
	Computed tupleValues `json:"computed"`          // guard computed from the data, tags expected from the flags
	Failed   []string    `json:"failed"`            // kinds of the failed checks, empty when none
	Written  *bool       `json:"written,omitempty"` // store-backed images: whether the block has a tuple
	Keyed    *keyedBlock `json:"keyed,omitempty"`   // keyed volumes: the block's keyed tag
}

func (*tupleRecord) recordType() string { return "tuple" }

func newInspectCmd(g *globalOptions) *cobra.Command {
	var (
		img     imageFlags
		pf      = newPIFlags()
		blocks  blocksFlags
		control string
	)
	cmd := &cobra.Command{
		Use:   "inspect IMAGE [--interleaved FORMAT | --dix METAFILE --format FORMAT] [--lba N [--count M]]",
		Short: "Show an image's format and, per block, the stored and computed tuples",
		Long: `Describe IMAGE: for a store-backed image the manifest, how many blocks have
tuples and a summary of the findings log; for an image with its own PI
(--interleaved, --dix) its format and size; for an NVMe namespace that
carries PI (--device-pi, or found as verify finds one) the format read
from the device, its namespace ID and the kernel's integrity profile.

A store is opened read-only, and its manifest is checked against IMAGE
(size and name) before anything else: another image's store is refused
(exit 8). The coverage count reads each stored page once.

` + servedHelp("inspect") + `

With --lba N (and --count M, default 1) show blocks N to N+M-1 side by
side: each block's state, its stored tuple, and the computed one (the guard
computed from the data, the tags expected from the tag flags or the
manifest). A "!" marks a stored value that fails its check.

` + exitCodesHelp(exitOK, exitOperational, exitUsage),
		Example: `  difctl inspect --interleaved 512+8 disk.dump
  difctl inspect --interleaved 512+8 --lba 5 --count 3 disk.dump
  difctl inspect disk.img
  difctl --json inspect disk.img --lba 0 --count 8`,
		Args: exactArgs(1, "IMAGE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := inspectOptions{globalOptions: *g, Image: args[0], LBA: -1, Store: img.store, Control: control}
			lba, count, set, err := blocks.blocks(false)
			if err != nil {
				return err
			}
			if set {
				opts.LBA, opts.Count = lba, count
			}
			if err := opts.resolve(&img, pf); err != nil {
				return err
			}
			if err := opts.resolveDevice(args[0], &img, pf, false); err != nil {
				return err
			}
			return runInspect(cmd.Context(), opts, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	img.register(cmd, true, " of a store-backed image")
	addDevicePIFlag(cmd, &img)
	pf.register(cmd, piFormat|piTags|piChecks)
	blocks.register(cmd, "first block to show", "number of blocks to show (default 1)")
	addKeyFlags(cmd, &g.Key, "check the key against a keyed volume and, with --lba, each block's keyed tag")
	addControlFlag(cmd, &control)
	return cmd
}

func runInspect(ctx context.Context, opts inspectOptions, stdout, stderr io.Writer) error {
	out := newOutput(stdout, opts.JSON)
	if !opts.SelfContained {
		return runInspectStore(ctx, opts, out, stderr)
	}
	im, err := openImage(opts.Image, opts.imageSpec, openRead)
	if err != nil {
		return err
	}
	defer im.Close()
	if opts.LBA < 0 {
		return emitImage(out, opts, im)
	}
	start, count := opts.LBA, opts.Count
	if err := checkLBAs(start, count, im.blocks()); err != nil {
		return err
	}
	f := im.f
	tt := newTupleTable(out, f)
	data, md := im.runBuffers(1)
	for lba := start; lba < start+count; lba++ {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		d, m, err := im.read(lba, 1, data, md)
		if err != nil {
			return fmt.Errorf("read %s at LBA %d: %w", im.name(), lba, err)
		}
		b, err := blockdev.InspectBlock(f, d, m, f.ParamsAt(opts.Params, lba))
		if err != nil {
			return err
		}
		if err := tt.row(tupleRecordOf(f, b, false)); err != nil {
			return err
		}
	}
	return tt.flush()
}

// emitImage writes the description of an image with its own PI.
func emitImage(out *output, opts inspectOptions, im *piImage) error {
	f := im.f
	layout := "interleaved"
	if f.Layout() == dif.Separate {
		layout = "dix"
	}
	pos := "last"
	if f.Position() == dif.PIFirst {
		pos = "first"
	}
	rec := &imageRecord{Image: opts.Image, Metadata: opts.Meta, Format: f.String(), Layout: layout,
		BlockSize: f.BlockSize(), MetadataSize: f.MetadataSize(), TupleSize: f.TupleSize(),
		Guard: f.Guard().Bits(), PIType: int(f.Type()), PIPosition: pos,
		Blocks: im.blocks(), Bytes: im.blocks() * int64(f.BlockSize())}
	if im.dev != nil {
		rec.Device = &devicePIRecord{NamespaceID: im.dev.Namespace().ID, KernelIntegrity: im.dev.Integrity().Format}
	}
	if out.json {
		return out.emit(rec)
	}
	tw := tabwriter.NewWriter(out.w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "image:\t%s\n", im.name())
	if d := rec.Device; d != nil {
		ki := d.KernelIntegrity
		if ki == "" {
			ki = "not shown"
		}
		fmt.Fprintf(tw, "device:\tNVMe namespace %d, PI read through passthrough; kernel integrity profile: %s\n", d.NamespaceID, ki)
	}
	fmt.Fprintf(tw, "format:\t%s (%s)\n", rec.Format, layout)
	fmt.Fprintf(tw, "blocks:\t%d of %d+%d bytes (%s of data)\n", rec.Blocks, rec.BlockSize, rec.MetadataSize, formatBytes(rec.Bytes))
	fmt.Fprintf(tw, "guard:\t%s, %d-byte tuple, PI %s in the metadata\n", guardName(f.Guard()), rec.TupleSize, pos)
	fmt.Fprintf(tw, "type:\t%d\n", rec.PIType)
	return tw.Flush()
}

// tupleRecordOf is the record of a block inspected in format f; stored
// says whether the image is store-backed, where a block may have no tuple.
func tupleRecordOf(f dif.Format, b *blockdev.BlockInspection, stored bool) *tupleRecord {
	rec := &tupleRecord{LBA: b.LBA, State: b.State.String(), Stored: tupleOf(f, b.Stored), Computed: tupleOf(f, b.Computed),
		Failed: make([]string, 0, len(b.Failed))}
	for _, k := range b.Failed {
		rec.Failed = append(rec.Failed, string(k))
	}
	if stored {
		w := b.Written
		rec.Written = &w
	}
	if ki := b.Keyed; ki != nil {
		rec.Keyed = &keyedBlock{Generation: ki.Gen, Check: ki.Check, PageMAC: ki.PageMAC, PageGone: ki.PageMissing}
		if ki.Gen != 0 {
			rec.Keyed.Stored = hexTag(ki.Stored)
		}
		if ki.Computed != nil {
			rec.Keyed.Computed = hexTag(*ki.Computed)
		}
	}
	return rec
}

func tupleOf(f dif.Format, t dif.Tuple) tupleValues {
	v := tupleValues{
		Guard:  tupleField(f, t, dif.FieldGuard),
		AppTag: tupleField(f, t, dif.FieldAppTag),
		RefTag: tupleField(f, t, dif.FieldRefTag),
	}
	if f.StorageTagBits() > 0 {
		v.StorageTag = tupleField(f, t, dif.FieldStorageTag)
	}
	return v
}

// tupleTable writes tuple records, or a table of them.
type tupleTable struct {
	out *output
	f   dif.Format
	tw  *tabwriter.Writer
}

func newTupleTable(out *output, f dif.Format) *tupleTable {
	t := &tupleTable{out: out, f: f}
	if !out.json {
		t.tw = tabwriter.NewWriter(out.w, 0, 0, 2, ' ', 0)
		cols := "LBA\tSTATE\tGUARD\tCOMPUTED\tAPP\tEXPECTED\tREF\tEXPECTED"
		if f.StorageTagBits() > 0 {
			cols += "\tSTORAGE\tEXPECTED"
		}
		fmt.Fprintln(t.tw, cols)
	}
	return t
}

func (t *tupleTable) row(rec *tupleRecord) error {
	if t.out.json {
		return t.out.emit(rec)
	}
	failed := map[string]bool{}
	for _, k := range rec.Failed {
		failed[k] = true
	}
	mark := func(v string, k blockdev.Kind) string {
		if failed[string(k)] {
			return v + " !"
		}
		return v
	}
	state := rec.State
	switch {
	case failed[string(blockdev.KindUnwrittenData)]:
		state = "unwritten, data !"
	case rec.Written != nil && !*rec.Written:
		state = "unwritten"
	}
	cols := []string{fmt.Sprint(rec.LBA), state,
		mark(rec.Stored.Guard, blockdev.KindGuard), rec.Computed.Guard,
		mark(rec.Stored.AppTag, blockdev.KindAppTag), rec.Computed.AppTag,
		mark(rec.Stored.RefTag, blockdev.KindRefTag), rec.Computed.RefTag}
	if t.f.StorageTagBits() > 0 {
		cols = append(cols, mark(rec.Stored.StorageTag, blockdev.KindStorageTag), rec.Computed.StorageTag)
	}
	if rec.Keyed != nil {
		cols = append(cols, keyedColumn(rec.Keyed))
	}
	_, err := fmt.Fprintln(t.tw, strings.Join(cols, "\t"))
	return err
}

func (t *tupleTable) flush() error {
	if t.tw == nil {
		return nil
	}
	return t.tw.Flush()
}

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
	Findings   map[string]int64 `json:"findings"`             // findings by state: open, rechecked-ok, closed, repaired, unrepairable
	OpenByKind map[string]int64 `json:"open_by_kind"`         // open findings by kind
	Repairs    []repairRecord   `json:"repairs,omitempty"`    // the latest repairs, most recent first (at most 100)
	Legs       []inspectLeg     `json:"legs,omitempty"`       // mirrored: the copies' states as the store records them, leg 0 first
	Parity     *inspectParity   `json:"parity,omitempty"`     // Reed-Solomon parity: the stripes' health as the store records it
	ScrubNext  *int64           `json:"scrub_next,omitempty"` // the scrub cursor, if a scrub ran
	ScrubPass  *uint64          `json:"scrub_pass,omitempty"` // completed scrub passes
	ScrubAt    string           `json:"scrub_updated,omitempty"`
	Keyed      bool             `json:"keyed,omitempty"`       // a keyed volume
	KeyCheck   string           `json:"key_check,omitempty"`   // its key check value (the key is never stored)
	KeyedCheck string           `json:"keyed_check,omitempty"` // key-matches with --key-file/--key-env, skipped without
}

func (*manifestRecord) recordType() string { return "manifest" }

// inspectLeg is a copy of a mirrored image as the store records it.
type inspectLeg struct {
	Leg         int    `json:"leg"`            // 0: the image
	Name        string `json:"name,omitempty"` // a mirror leg's path
	StaleBlocks int64  `json:"stale_blocks"`   // blocks it may hold stale (resync)
	StaleAll    bool   `json:"stale_all,omitempty"`
	StaleSince  string `json:"stale_since,omitempty"`
}

// inspectParity is an image's parity as the store records it (inspect,
// parity status).
type inspectParity struct {
	K          int    `json:"k"`
	M          int    `json:"m"`
	Depth      int64  `json:"depth"`
	Path       string `json:"path"`         // the parity file
	ID         string `json:"id"`           // its identity, in its header
	Added      string `json:"added"`        // RFC 3339
	Stripes    int64  `json:"stripes"`      //
	Recorded   int64  `json:"recorded"`     // stripes with parity
	Unprotect  int64  `json:"unprotected"`  // stripes without (never computed, or dropped by a write): difctl parity add resumes
	Pending    int64  `json:"pending"`      // stripes under a parity intent (an interrupted session): recomputed at the next writable open
	Burst      int64  `json:"burst_blocks"` // a run of this many neighbouring bad blocks is rebuildable
	ParitySize int64  `json:"parity_bytes"` // the parity file's parity blocks
}

// inspectParityOf is the record of a parity overview.
func inspectParityOf(p *blockdev.ParityOverview) *inspectParity {
	if p == nil {
		return nil
	}
	return &inspectParity{K: p.Config.Data, M: p.Config.Parity, Depth: p.Config.Depth, Path: p.Config.Path, ID: p.Config.ID,
		Added: p.Config.Added.UTC().Format(time.RFC3339), Stripes: p.Stripes, Recorded: p.Recorded, Unprotect: p.Stripes - p.Recorded,
		Pending: p.Dirty, Burst: p.BurstTolerance, ParitySize: p.ParityBytes}
}

// parityText is the line of text of an image's parity.
func parityText(p *inspectParity) string {
	s := fmt.Sprintf("%d+%d depth %d in %s: %d of %d stripes protected", p.K, p.M, p.Depth, p.Path, p.Recorded, p.Stripes)
	if p.Unprotect > 0 {
		s += fmt.Sprintf(", %d unprotected (difctl parity add resumes)", p.Unprotect)
	}
	if p.Pending > 0 {
		s += fmt.Sprintf(", %d pending recovery", p.Pending)
	}
	return s + fmt.Sprintf("; heals %d erasures a stripe, bursts of %d blocks", p.M, p.Burst)
}

// repairRecord is a repaired finding, in inspect's manifest record.
type repairRecord struct {
	LBA      int64  `json:"lba"`
	Kind     string `json:"kind"`
	Source   string `json:"source"`   // the copy taken
	Leg      int    `json:"leg"`      // the mirror leg repaired (0: the image)
	Repaired string `json:"repaired"` // when, RFC 3339
}

// runInspectStore describes a store-backed image, or shows its blocks.
func runInspectStore(ctx context.Context, opts inspectOptions, out *output, stderr io.Writer) error {
	url := storeURL(opts.Image, opts.Store)
	st, err := opts.served.storeTuples(opts.Image, url)
	if err != nil {
		return onServer(ctx, err, opts.served, opts.controlRequest, out.w, stderr)
	}
	defer st.Close()
	// A served volume's image was checked when the server opened it (and
	// a sample read now could race with its clients' writes).
	if opts.served == nil {
		if err := checkInspected(ctx, opts.Image, url, st); err != nil {
			return err
		}
	}
	vk, err := inspectKey(opts, st.t)
	if err != nil {
		return err
	}
	if opts.LBA >= 0 {
		return inspectStoreBlocks(ctx, opts, out, st, vk)
	}
	ov, err := blockdev.Inspect(ctx, st.t, scrubName)
	if err != nil {
		return inspectError(opts.Image, url, err)
	}
	rec := manifestRecordOf(opts.Image, st, ov, vk != nil)
	if out.json {
		return out.emit(rec)
	}
	return manifestText(out.w, rec, st.f)
}

// checkInspected refuses a store that does not describe the image, before
// anything is read by it: first by what the image reports (its size, its
// stable identifiers), then by a sample of its data.
func checkInspected(ctx context.Context, image, url string, st *storeTuples) error {
	fi, err := os.Stat(image)
	if err != nil {
		return asOpenError(err)
	}
	size := fi.Size()
	var dev *device.File
	if !fi.Mode().IsRegular() {
		if dev, err = openDevice(image, true); err != nil {
			return err
		}
		defer dev.Close()
		size = dev.Size()
	}
	if err := checkIdentity(image, url, st.m, size); err != nil {
		return err
	}
	if dev == nil {
		if dev, err = openDevice(image, true); err != nil {
			return err
		}
		defer dev.Close()
	}
	return checkImage(ctx, image, url, st.t, dev)
}

// manifestRecordOf is the record of a store-backed image: its manifest and
// the overview of its volume; withKey says whether the key given matched.
func manifestRecordOf(image string, st *storeTuples, ov *blockdev.Overview, withKey bool) *manifestRecord {
	t, m, f := st.t, st.m, st.f
	rec := &manifestRecord{Image: image, Store: st.url, Volume: t.Volume(), Format: displayFormat(m.Format),
		BlockSize: m.BlockSize, TupleSize: m.TupleSize, SectorSums: m.SectorSums,
		RefTag: hexWidth(0, m.InitialRefTag, f.RefTagBits()), AppTag: hexWidth(0, uint64(m.AppTag), 16), AppMask: hexWidth(0, uint64(m.AppTagMask), 16),
		DeviceSize: m.DeviceSize, DeviceID: m.DeviceID, Blocks: ov.Blocks, Written: ov.Written, Unwritten: ov.Blocks - ov.Written,
		Tool: m.Tool, Schema: m.Schema, Findings: map[string]int64{}, OpenByKind: map[string]int64{},
		Keyed: m.Keyed(), KeyCheck: m.KeyCheck}
	if m.Keyed() {
		rec.KeyedCheck = keyedSkipped
		if withKey {
			rec.KeyedCheck = keyMatches
		}
	}
	if !m.Created.IsZero() {
		rec.Created = m.Created.UTC().Format(time.RFC3339)
	}
	for s, n := range ov.Findings {
		rec.Findings[s.String()] = n
	}
	for k, n := range ov.OpenByKind {
		rec.OpenByKind[string(k)] = n
	}
	if ms := ov.Mirrors; len(ms.Legs) > 0 {
		for i, l := range append([]store.Leg{ms.Primary}, ms.Legs...) {
			il := inspectLeg{Leg: i, StaleBlocks: l.StaleBlocks(ov.Blocks), StaleAll: l.All}
			if i > 0 {
				il.Name = l.Name
			}
			if !l.StaleSince.IsZero() {
				il.StaleSince = l.StaleSince.UTC().Format(time.RFC3339)
			}
			rec.Legs = append(rec.Legs, il)
		}
	}
	rec.Parity = inspectParityOf(ov.Parity)
	for _, f := range ov.Repairs {
		rec.Repairs = append(rec.Repairs, repairRecord{LBA: f.LBA, Kind: f.Field, Source: f.Source, Leg: f.Leg,
			Repaired: f.Repaired.UTC().Format(time.RFC3339Nano)})
	}
	if c := ov.Scrub; c != nil {
		next, pass := c.Next, c.Pass
		rec.ScrubNext, rec.ScrubPass = &next, &pass
		if !c.Updated.IsZero() {
			rec.ScrubAt = c.Updated.UTC().Format(time.RFC3339)
		}
	}
	return rec
}

// manifestText writes the manifest record of an image of format f as text.
func manifestText(w io.Writer, rec *manifestRecord, f dif.Format) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "image:\t%s\n", rec.Image)
	fmt.Fprintf(tw, "store:\t%s (volume %q, schema %d, created %s by %s)\n", rec.Store, rec.Volume, rec.Schema, orDash(rec.Created), orDash(printable(rec.Tool)))
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
	repairs := ""
	if n, m := rec.Findings["unrepairable"], rec.Findings["repaired"]; n+m > 0 {
		repairs = fmt.Sprintf(", %d unrepairable, %d repaired", n, m)
	}
	fmt.Fprintf(tw, "findings:\t%s%s, %d rechecked-ok, %d closed\n", open, repairs, rec.Findings["rechecked-ok"], rec.Findings["closed"])
	for _, l := range rec.Legs {
		name := l.Name
		if l.Leg == 0 {
			name = rec.Image + " (the image)"
		}
		state := "in sync"
		switch {
		case l.StaleAll:
			state = "stale: every block (resync)"
		case l.StaleBlocks > 0:
			state = fmt.Sprintf("stale: %d blocks since %s (resync)", l.StaleBlocks, l.StaleSince)
		}
		fmt.Fprintf(tw, "leg %d:\t%s: %s\n", l.Leg, name, state)
	}
	if rec.Parity != nil {
		fmt.Fprintf(tw, "parity:\t%s\n", parityText(rec.Parity))
	}
	for i, r := range rec.Repairs {
		if i == maxTextRepairs {
			fmt.Fprintf(tw, "\t... (--json lists the latest %d)\n", len(rec.Repairs))
			break
		}
		fmt.Fprintf(tw, "repair:\tLBA %d (%s) from %s, %s\n", r.LBA, kindName(blockdev.Kind(r.Kind)), r.Source, r.Repaired)
	}
	if rec.ScrubNext != nil {
		fmt.Fprintf(tw, "scrub:\t%d passes complete, next block %d, updated %s\n", *rec.ScrubPass, *rec.ScrubNext, orDash(rec.ScrubAt))
	} else {
		fmt.Fprintf(tw, "scrub:\tnever run\n")
	}
	return tw.Flush()
}

// inspectStoreBlocks shows blocks of a store-backed image: the tuple in
// the store beside the one computed from the data on the image (read
// directly, not through the volume).
func inspectStoreBlocks(ctx context.Context, opts inspectOptions, out *output, st *storeTuples, vk *blockdev.VolumeKey) error {
	start, count := opts.LBA, opts.Count
	if err := checkLBAs(start, count, st.t.Blocks()); err != nil {
		return err
	}
	dev, err := openDevice(opts.Image, true)
	if err != nil {
		return err
	}
	defer dev.Close()
	if err := checkIdentity(opts.Image, st.url, st.m, dev.Size()); err != nil {
		return err
	}
	f := st.f.WithLayout(dif.Separate)
	tt := newTupleTable(out, f)
	if err := blockdev.InspectStored(ctx, st.t, dev, start, count, vk, func(b *blockdev.BlockInspection) error {
		return tt.row(tupleRecordOf(f, b, true))
	}); err != nil {
		return inspectError(opts.Image, st.url, err)
	}
	return tt.flush()
}

// inspectError explains a failure of the library's inspection of a
// store-backed image (a *blockdev.InspectError) as the other commands
// word it; other errors are returned as they are.
func inspectError(image, url string, err error) error {
	var ie *blockdev.InspectError
	switch {
	case !errors.As(err, &ie):
		return err
	case ie.Op == "read":
		return fmt.Errorf("read %s at LBA %d: %w", image, ie.LBA, ie.Err)
	case ie.Op == "coverage":
		return volumeError(image, url, ie.Err)
	}
	return storeErr(url, ie.Err)
}

// keyMatches is the keyed_check of inspect's manifest record when the key
// given is the volume's.
const keyMatches = "key-matches"

// keyedBlock is a block's keyed tag as inspect --lba shows it.
type keyedBlock struct {
	Generation uint64 `json:"generation"`                // write generation of its nonce, 0 when it has no tag
	Stored     string `json:"stored,omitempty"`          // the stored tag, hex
	Computed   string `json:"computed,omitempty"`        // computed from the data with the key
	Check      string `json:"check"`                     // ok, mismatch, missing, unwritten, page-mac, page-missing, or skipped (no key)
	PageMAC    bool   `json:"page_mac_failed,omitempty"` // the tag page holding it fails its MAC (with the key)
	PageGone   bool   `json:"page_missing,omitempty"`    // the tag page holding it is missing from the store
}

// inspectKey returns the keys of inspect's keyed volume, nil without
// --key-file/--key-env; a wrong key is refused.
func inspectKey(opts inspectOptions, t *store.Tuples) (*blockdev.VolumeKey, error) {
	if opts.served != nil {
		return opts.served.volumeKey(opts.Image, t)
	}
	key, err := opts.Key.load()
	if err != nil || key == nil {
		return nil, err
	}
	m := t.Manifest()
	vk, err := key.ForVolume(t.Volume(), &m)
	if err != nil {
		return nil, keyError(opts.Image, err)
	}
	if err := t.SetPageMACKey(vk.PageKey()); err != nil {
		return nil, err
	}
	return vk, nil
}

// keyedManifestText is inspect's "keyed:" line.
func keyedManifestText(rec *manifestRecord) string {
	s := "yes, Poly1305-AES tags per block, key check value " + rec.KeyCheck
	if rec.KeyedCheck == keyMatches {
		return s + "; the key given matches"
	}
	return s + "; no key given (--key-file or --key-env): keyed check skipped"
}

// keyedColumn is the keyed column of inspect --lba's text table.
func keyedColumn(kb *keyedBlock) string {
	if kb.Check == "ok" || kb.Check == "skipped" {
		return "keyed=" + kb.Check
	}
	return "keyed=" + kb.Check + " !"
}

// maxTextRepairs bounds the repairs inspect's text lists.
const maxTextRepairs = 10
