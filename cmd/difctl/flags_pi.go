package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/difctl/difctl/dif"
	"github.com/spf13/cobra"
)

// The protection-information flags shared by every command that generates,
// verifies or rewrites PI. They are defined once here; a command registers
// the groups it takes with piFlags.register and turns them into a dif
// format, dif params and an LBA range with resolveFormat, params and
// rng.bounds.
//
//	format  --block-size, --guard, --type, --pi-first: override the format
//	        given as text (--interleaved, --format, --from) or, without one,
//	        build it: 512-byte blocks, 16-bit guard, Type 1, metadata = tuple
//	tags    --ref-tag (of block 0), --app-tag, --app-mask, --storage-tag
//	checks  --no-guard, --no-app, --no-ref, --no-storage
//	range   --range START:END or START+COUNT (LBAs)
type piGroup uint8

const (
	piFormat piGroup = 1 << iota
	piTags
	piChecks
	piRange
)

// piFlags hold the values of the shared PI flags.
type piFlags struct {
	blockSize  blockSizeFlag
	guard      guardFlag
	typ        typeFlag
	piFirst    bool
	refTag     uintFlag
	appTag     uintFlag
	appMask    uintFlag
	storageTag uintFlag
	noGuard    bool
	noApp      bool
	noRef      bool
	noStorage  bool
	rng        rangeFlag
}

func newPIFlags() *piFlags {
	return &piFlags{
		refTag:     uintFlag{bits: 64},
		appTag:     uintFlag{bits: 16},
		appMask:    uintFlag{bits: 16},
		storageTag: uintFlag{bits: 64},
	}
}

// register adds the flags of the given groups to cmd.
func (pf *piFlags) register(cmd *cobra.Command, groups piGroup) {
	f := cmd.Flags()
	if groups&piFormat != 0 {
		f.Var(&pf.blockSize, "block-size", "data bytes per block: 512 to 64KiB, a power of two (default 512, or the format's)")
		f.Var(&pf.guard, "guard", "guard width: 16 (CRC-16/T10-DIF), 32 (CRC-32C) or 64 (CRC-64/NVME) (default 16, or the format's)")
		f.Var(&pf.typ, "type", "PI type: 0, 1, 2 or 3 (default 1, or the format's)")
		f.BoolVar(&pf.piFirst, "pi-first", false, "the PI tuple is the first bytes of the metadata (default: the last)")
	}
	if groups&piTags != 0 {
		f.Var(&pf.refTag, "ref-tag", "reference tag of block 0 (Types 1 and 2: block N carries REF+N)")
		f.Var(&pf.appTag, "app-tag", "application tag (checked under --app-mask)")
		f.Var(&pf.appMask, "app-mask", "app tag bits to check (default 0xffff with --app-tag, else 0: not checked)")
		f.Var(&pf.storageTag, "storage-tag", "storage tag (formats with sts=N)")
	}
	if groups&piChecks != 0 {
		f.BoolVar(&pf.noGuard, "no-guard", false, "do not check guards")
		f.BoolVar(&pf.noApp, "no-app", false, "do not check app tags")
		f.BoolVar(&pf.noRef, "no-ref", false, "do not check ref tags")
		f.BoolVar(&pf.noStorage, "no-storage", false, "do not check storage tags")
	}
	if groups&piRange != 0 {
		f.Var(&pf.rng, "range", "LBAs to process: START:END (END excluded, either may be left out) or START+COUNT")
	}
}

// resolveFormat returns the format described by text (the dif text form,
// "" for none) with the format flags applied over it. A format that does
// not hold together is a usage error.
func (pf *piFlags) resolveFormat(text string) (dif.Format, error) {
	o := dif.Options{BlockSize: 512, Guard: dif.Guard16, Type: dif.Type1}
	if text != "" {
		f, err := dif.Parse(text)
		if err != nil {
			return dif.Format{}, &usageError{err: err}
		}
		o = f.Options()
	}
	if pf.blockSize.n != 0 {
		o.BlockSize = pf.blockSize.n
	}
	if pf.guard.set {
		o.Guard = pf.guard.g
	}
	if pf.typ.set {
		o.Type = pf.typ.t
	}
	if pf.piFirst {
		o.Position = dif.PIFirst
	}
	if text == "" {
		// Built from flags: the metadata is the tuple. A format given as
		// text keeps its metadata size (NewFormat refuses a guard whose
		// tuple no longer fits).
		o.MetadataSize = o.Guard.TupleSize()
	}
	f, err := dif.NewFormat(o)
	if err != nil {
		if text != "" {
			return dif.Format{}, usageErrorf("format %s with the flags given: %w", text, err)
		}
		return dif.Format{}, &usageError{err: err}
	}
	return f, nil
}

// params returns the dif params of the tag and check flags for format f,
// or a usage error if a tag does not fit its field.
func (pf *piFlags) params(f dif.Format) (dif.Params, error) {
	p := dif.Params{
		RefTag:     pf.refTag.v,
		StorageTag: pf.storageTag.v,
		AppTag:     uint16(pf.appTag.v),
		AppMask:    uint16(pf.appMask.v),
	}
	if pf.appTag.set && !pf.appMask.set {
		p.AppMask = 0xffff
	}
	if pf.noGuard {
		p.Skip |= dif.CheckGuard
	}
	if pf.noApp {
		p.Skip |= dif.CheckAppTag
	}
	if pf.noRef {
		p.Skip |= dif.CheckRefTag
	}
	if pf.noStorage {
		p.Skip |= dif.CheckStorageTag
	}
	if b := f.RefTagBits(); b < 64 && p.RefTag>>b != 0 {
		return p, usageErrorf("--ref-tag %#x does not fit the %d-bit ref tag of format %s", p.RefTag, b, f)
	}
	if b := f.StorageTagBits(); b < 64 && p.StorageTag>>b != 0 {
		if b == 0 {
			return p, usageErrorf("--storage-tag %#x: format %s has no storage tag (add sts=N)", p.StorageTag, f)
		}
		return p, usageErrorf("--storage-tag %#x does not fit the %d-bit storage tag of format %s", p.StorageTag, b, f)
	}
	return p, nil
}

// blockSizeFlag is a block size: a power of two from 512 to 64 KiB, the
// data block of a format (--block-size) or the unit of a badblocks list
// (--badblocks-block-size, as badblocks -b).
type blockSizeFlag struct{ n int }

func (f *blockSizeFlag) String() string {
	if f.n == 0 {
		return ""
	}
	return strconv.Itoa(f.n)
}

func (f *blockSizeFlag) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	if n < dif.MinBlockSize || n > dif.MaxBlockSize || n&(n-1) != 0 {
		return fmt.Errorf("block size %s is not a power of two from 512 to 64KiB", s)
	}
	f.n = n
	return nil
}

func (*blockSizeFlag) Type() string { return "size" }

// guardFlag is a guard width: 16, 32 or 64 (or crc16, crc32 or crc32c,
// crc64).
type guardFlag struct {
	g   dif.Guard
	set bool
}

func (f *guardFlag) String() string {
	if !f.set {
		return ""
	}
	return strconv.Itoa(f.g.Bits())
}

func (f *guardFlag) Set(s string) error {
	switch strings.TrimPrefix(strings.ToLower(s), "crc") {
	case "16":
		f.g = dif.Guard16
	case "32", "32c":
		f.g = dif.Guard32
	case "64":
		f.g = dif.Guard64
	default:
		return fmt.Errorf("unknown guard %q (want 16, 32 or 64)", s)
	}
	f.set = true
	return nil
}

func (*guardFlag) Type() string { return "bits" }

// typeFlag is a PI type: 0 to 3 (or type0 to type3).
type typeFlag struct {
	t   dif.Type
	set bool
}

func (f *typeFlag) String() string {
	if !f.set {
		return ""
	}
	return strconv.Itoa(int(f.t))
}

func (f *typeFlag) Set(s string) error {
	switch strings.TrimPrefix(strings.ToLower(s), "type") {
	case "0":
		f.t = dif.Type0
	case "1":
		f.t = dif.Type1
	case "2":
		f.t = dif.Type2
	case "3":
		f.t = dif.Type3
	default:
		return fmt.Errorf("unknown PI type %q (want 0, 1, 2 or 3)", s)
	}
	f.set = true
	return nil
}

func (*typeFlag) Type() string { return "type" }

// uintFlag is an unsigned integer of at most bits bits, in decimal or with
// a 0x, 0o or 0b prefix (underscores allowed, as in Go).
type uintFlag struct {
	v    uint64
	bits int
	set  bool
}

func (f *uintFlag) String() string {
	if !f.set {
		return ""
	}
	return fmt.Sprintf("%#x", f.v)
}

func (f *uintFlag) Set(s string) error {
	v, err := parseUint(s, f.bits)
	if err != nil {
		return err
	}
	f.v, f.set = v, true
	return nil
}

func (*uintFlag) Type() string { return "uint" }

func parseUint(s string, bitSize int) (uint64, error) {
	v, err := strconv.ParseUint(strings.TrimSpace(s), 0, bitSize)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return 0, fmt.Errorf("%q does not fit in %d bits", s, bitSize)
		}
		return 0, fmt.Errorf("%q is not an unsigned integer", s)
	}
	return v, nil
}

// rangeFlag is a range of LBAs: START:END with END excluded (START:
// runs to the end, :END starts at 0) or START+COUNT.
type rangeFlag struct {
	start, end int64 // end -1: to the end
	set        bool
}

func (f *rangeFlag) String() string {
	switch {
	case !f.set:
		return ""
	case f.end < 0:
		return fmt.Sprintf("%d:", f.start)
	}
	return fmt.Sprintf("%d:%d", f.start, f.end)
}

func (f *rangeFlag) Set(s string) error {
	bad := fmt.Errorf("invalid range %q (want START:END or START+COUNT)", s)
	lba := func(t string, dflt int64) (int64, error) {
		if t = strings.TrimSpace(t); t == "" && dflt >= -1 {
			return dflt, nil
		}
		v, err := parseUint(t, 63)
		if err != nil {
			return 0, bad
		}
		return int64(v), nil
	}
	if a, b, ok := strings.Cut(s, "+"); ok {
		start, err := lba(a, -2)
		if err != nil {
			return err
		}
		count, err := lba(b, -2)
		if err != nil || count == 0 || start > 1<<62 || count > 1<<62 {
			return fmt.Errorf("invalid range %q: want a positive COUNT", s)
		}
		f.start, f.end, f.set = start, start+count, true
		return nil
	}
	a, b, ok := strings.Cut(s, ":")
	if !ok {
		return bad
	}
	start, err := lba(a, 0)
	if err != nil {
		return err
	}
	end, err := lba(b, -1)
	if err != nil {
		return err
	}
	if end >= 0 && end <= start {
		return fmt.Errorf("invalid range %q: END must be after START", s)
	}
	f.start, f.end, f.set = start, end, true
	return nil
}

func (*rangeFlag) Type() string { return "range" }

// bounds returns the first LBA and the number of blocks the range selects
// out of blocks, all of them when the flag was not given. A range beyond
// the end is a usage error.
func (f *rangeFlag) bounds(blocks int64) (start, count int64, err error) {
	if !f.set {
		return 0, blocks, nil
	}
	end := f.end
	if end < 0 {
		end = blocks
	}
	if f.start >= end || end > blocks {
		return 0, 0, usageErrorf("--range %s is beyond the end: the image has %d blocks (LBAs 0 to %d)", f, blocks, blocks-1)
	}
	return f.start, end - f.start, nil
}

// checkLBAs refuses blocks [lba, lba+count) that are not all in an image
// of blocks blocks (a usage error).
func checkLBAs(lba, count, blocks int64) error {
	if lba < 0 || count < 1 || lba >= blocks || count > blocks-lba {
		if count == 1 {
			return usageErrorf("--lba %d is beyond the end: the image has %d blocks (LBAs 0 to %d)", lba, blocks, blocks-1)
		}
		return usageErrorf("LBAs %d to %d are beyond the end: the image has %d blocks (LBAs 0 to %d)", lba, lba+count-1, blocks, blocks-1)
	}
	return nil
}

// formatFlag is a format in the dif text form ("512+8", "4096+16:crc64"),
// checked when set.
type formatFlag struct{ text string }

func (f *formatFlag) String() string { return f.text }

func (f *formatFlag) Set(s string) error {
	s = normalizeFormatText(s)
	if _, err := dif.Parse(s); err != nil {
		return err
	}
	f.text = s
	return nil
}

func (*formatFlag) Type() string { return "format" }

// imageSpec is what a command takes from --interleaved, --dix/--format and
// the PI flags when its image carries its own protection information; it
// is the zero value for a store-backed image.
type imageSpec struct {
	// SelfContained: the image carries its PI (interleaved or DIX) in
	// Format, checked with Params. Otherwise its tuples are in a store.
	SelfContained bool
	Meta          string // the metadata file of a DIX pair; "" otherwise
	// Device: the image is an NVMe namespace that carries its PI, read
	// through passthrough (device_pi.go); SelfContained is set too.
	Device bool
	Format dif.Format
	Params dif.Params
}

// resolve fills s from the image flags and the PI flags when they name a
// self-contained image, and leaves it alone otherwise.
func (s *imageSpec) resolve(img *imageFlags, pf *piFlags) error {
	if !img.selfContained() {
		return nil
	}
	text, meta, err := img.spec()
	if err != nil {
		return err
	}
	if s.Format, err = pf.resolveFormat(text); err != nil {
		return err
	}
	if s.Params, err = pf.params(s.Format); err != nil {
		return err
	}
	s.SelfContained, s.Meta = true, meta
	return nil
}

// normalizeFormatText accepts the names users give the guards: crc32c (the
// usual name of CRC-32C) for dif's crc32.
func normalizeFormatText(s string) string {
	parts := strings.Split(s, ":")
	for i, p := range parts {
		if strings.EqualFold(p, "crc32c") {
			parts[i] = "crc32"
		}
	}
	return strings.Join(parts, ":")
}

// imageFlags select an image that carries its own protection information:
// --interleaved FORMAT (an extended-LBA dump) or --dix METAFILE with
// --format FORMAT (a data image and its metadata file). Without either, the
// image is a plain one protected by a store, --store (default
// IMAGE.difdb).
type imageFlags struct {
	interleaved formatFlag
	dix         string
	format      formatFlag
	store       string // --store: the store of a store-backed image
	devicePI    bool   // --device-pi: an NVMe namespace with PI (device_pi.go)
}

// register adds --interleaved, --dix, --format (withFormat) and --store,
// whose help says what the store keeps (storeOf, as storeFlag takes it).
func (fl *imageFlags) register(cmd *cobra.Command, withFormat bool, storeOf string) {
	storeFlag(cmd, &fl.store, storeOf)
	f := cmd.Flags()
	f.Var(&fl.interleaved, "interleaved", "IMAGE is an extended-LBA dump in FORMAT (data and PI interleaved: 512+8, 4096+16:crc64, ...)")
	f.StringVar(&fl.dix, "dix", "", "IMAGE is the data of a DIX pair whose metadata file is `METAFILE` (format: --format)")
	if withFormat {
		f.Var(&fl.format, "format", "the PI format, in the text form 4096+8, 4096+16:crc64:type3 ... (with --dix)")
	}
}

// selfContained reports whether the flags name an image with its own PI.
func (fl *imageFlags) selfContained() bool { return fl.interleaved.text != "" || fl.dix != "" }

// spec checks the combination of the flags and returns the format text and
// the metadata file ("" for an interleaved image).
func (fl *imageFlags) spec() (text, meta string, err error) {
	switch {
	case fl.interleaved.text != "" && fl.dix != "":
		return "", "", usageErrorf("--interleaved and --dix exclude each other: an image is either interleaved or a DIX pair")
	case fl.interleaved.text != "" && fl.format.text != "":
		return "", "", usageErrorf("--interleaved takes the format itself; leave out --format")
	case fl.interleaved.text != "":
		if f, err := dif.Parse(fl.interleaved.text); err == nil && f.Layout() == dif.Separate {
			return "", "", usageErrorf("--interleaved %s names the DIX layout (data and PI in separate files): give an interleaved format (leave out :dix), or --dix METAFILE --format for a DIX pair", fl.interleaved.text)
		}
		return fl.interleaved.text, "", nil
	case fl.dix != "":
		if f, err := dif.Parse(fl.format.text); err == nil && fl.format.text != "" && f.Layout() == dif.Interleaved && strings.Contains(fl.format.text, "interleaved") {
			return "", "", usageErrorf("--dix with --format %s: that format names the interleaved layout; a DIX pair keeps data and PI apart (leave out :interleaved)", fl.format.text)
		}
		return fl.format.text, fl.dix, nil
	}
	return "", "", usageErrorf("name the image's layout: --interleaved FORMAT or --dix METAFILE")
}
