package store

import (
	"encoding/json"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"time"
)

// SchemaVersion is the schema version of the volumes this package
// creates, and the newest it reads: a volume of a newer one is refused
// with ErrUnsupported. The versions, each readable by the programs that
// know it and refused by older ones:
//
//   - 1 recorded empty pages by their absence: still read and written in
//     its own way (Tuples.Dense reports false).
//   - 2 (DenseSchemaVersion) records every page, empty pages included
//     (page.go), so that a missing page is detected as corruption.
//   - 3, 4 and 5: keyed volumes (KeyedSchemaVersion, SealedSchemaVersion).
//   - 6 (MirrorSchemaVersion): volumes with mirror legs.
//   - 7 (RunsSchemaVersion): records the pages never written as empty
//     runs (runs.go), one record for the whole volume at creation,
//     keyed or not, with or without legs.
//
// Up to version 6 the number also said which features a volume has
// (keyed, sealed, mirror legs). From version 7 on it does not: KeyCheck
// says whether a volume is keyed (and a keyed volume of version 7 is
// sealed), and the manifest's "features" list names the others
// ("mirror-legs", "parity"). A program refuses a volume with a feature it
// does not know (ErrUnsupported), so that later features need no new
// version number.
const SchemaVersion = RunsSchemaVersion

// DenseSchemaVersion is the first schema version that records every page
// of a volume (see SchemaVersion).
const DenseSchemaVersion = 2

// KeyedSchemaVersion is the schema version of keyed volumes (those whose
// manifest has a KeyCheck) before version 7: version 2 plus the keyed tag
// pages, tag intents and generation record of keyed.go. Unkeyed volumes
// kept version 2, so that older programs still opened them; a program
// that knows only version 2 refuses a keyed volume (ErrUnsupported)
// instead of writing it without tags.
//
// Version 4 seals every tag page from creation on (keyed.go), so that a
// missing one is detected. Keyed stores of version 3, written by
// development builds that left the tag pages of unwritten blocks out
// (never released), are refused with ErrUnsupported: their missing pages
// cannot be told from deleted ones. Protect such a volume again
// (difctl protect --reprotect).
const KeyedSchemaVersion = 4

// SealedSchemaVersion is the schema version of keyed volumes with a seal
// (seal.go) before version 7: version 4 plus the seal record, which every
// commit of tag pages must update. A program that knows only version 4
// refuses such a volume (ErrUnsupported) instead of writing tag pages
// without updating the seal, which would make the next CheckSeal report a
// replay. A version 4 volume moves to it in the commit that first writes
// its seal.
const SealedSchemaVersion = 5

// MirrorSchemaVersion is the schema version of volumes of version 6 or
// older with mirror legs (mirror.go), keyed (and sealed) or not: their
// writes must reach every leg, so programs that know nothing of legs must
// refuse them. A volume whose last leg is removed goes back to its
// version without legs. A volume of version 7 keeps its version and
// lists the feature "mirror-legs" instead.
const MirrorSchemaVersion = 6

// RunsSchemaVersion is the schema version of volumes that may record
// unwritten pages as empty runs (runs.go): every volume this package
// creates. A program that knows only version 6 would take the pages of a
// run for missing ones; it refuses the volume instead.
const RunsSchemaVersion = 7

// Features of a volume of schema version 7 or later (Manifest.Features).
const (
	// FeatureMirrorLegs: the volume has mirror legs (mirror.go), and
	// its "mirrors" record must exist.
	FeatureMirrorLegs = "mirror-legs"
)

// knownFeatures are the features this package reads and keeps.
var knownFeatures = []string{FeatureMirrorLegs, FeatureParity}

// oldKeyedSchema is the keyed schema refused since version 4.
const oldKeyedSchema = 3

// DefaultPageTuples is the number of tuples per page value unless the
// manifest says otherwise.
const DefaultPageTuples = 1024

const (
	manifestKind     = "difctl.store.manifest"
	maxManifestBytes = 64 << 10
	maxFormatLen     = 256
	maxDeviceIDLen   = 4096
	maxBlockSize     = 1 << 20
	// MaxPages is the most tuple pages a volume may have: 2^38 blocks
	// with the default PageTuples (128 TiB of 512-byte blocks, 1 PiB of 4
	// KiB blocks), or up to 2^44 with 65,536 tuples a page. Creating a
	// volume writes one record whatever its size (runs.go), but a volume
	// written whole keeps a record per page, and a check of every page
	// reads them all; a larger device is refused at once.
	MaxPages = 1 << 28
)

// Manifest describes a volume. It is stored as versioned, self-describing
// JSON; Open compares it field by field and refuses a volume whose stored
// manifest differs from the caller's.
//
// The store does not interpret the PI format: Format is the dif package's
// canonical text form (e.g. "4096+16:crc64:type1:pi-last"), kept and
// compared verbatim. TupleSize, SectorSums and the tag fields are the facts
// the store itself needs.
type Manifest struct {
	// Format is the canonical PI format string. Required.
	Format string
	// BlockSize is the data bytes per block (1..1 MiB). Required.
	BlockSize int
	// TupleSize is the PI tuple size in bytes: 8 or 16. Required.
	TupleSize int
	// SectorSums keeps a CRC-32C of every block beside its tuple.
	// NewManifest turns it on for 8-byte tuples (16-bit guards).
	SectorSums bool
	// PageTuples is the number of tuples per stored page, a power of two
	// in 64..65536. Zero means DefaultPageTuples.
	PageTuples int
	// InitialRefTag is the reference tag of block 0 (Type 1 and 2).
	InitialRefTag uint64
	// AppTag and AppTagMask are the application tag policy: a block's app
	// tag must satisfy (stored & mask) == (AppTag & mask).
	AppTag, AppTagMask uint16
	// DeviceSize is the protected device's size in bytes, a multiple of
	// BlockSize. Required.
	DeviceSize int64
	// DeviceID identifies the protected device (a serial, a WWN, a path).
	DeviceID string

	// KeyCheck is the key check value of a keyed volume, 32 hex digits:
	// a one-way function of the volume's key (see blockdev) that tells a
	// wrong key at open. Empty means the volume is not keyed. The key itself
	// is never stored.
	KeyCheck string
	// VolumeUID is a keyed volume's identity, 32 hex digits chosen at
	// random when it is created: every keyed tag and page MAC covers it, so
	// that a block or page copied from another volume under the same key
	// fails. Required with KeyCheck, empty without it.
	VolumeUID string

	// Schema is the store schema version, set when the volume is created.
	Schema int
	// Features are the features of a volume of schema version 7 or later
	// beyond those of its version (FeatureMirrorLegs), kept by the store;
	// creation ignores them.
	Features []string
	// Created is when the volume was created (set if zero).
	Created time.Time
	// Tool names the program and version that created the volume.
	Tool string
}

// NewManifest returns a manifest with the defaults filled in: sector
// checksums on for 8-byte tuples, DefaultPageTuples per page.
func NewManifest(format string, blockSize, tupleSize int, deviceSize int64, deviceID string) Manifest {
	return Manifest{
		Format:     format,
		BlockSize:  blockSize,
		TupleSize:  tupleSize,
		SectorSums: tupleSize == 8,
		PageTuples: DefaultPageTuples,
		DeviceSize: deviceSize,
		DeviceID:   deviceID,
	}
}

// Blocks returns the number of blocks of the device.
func (m *Manifest) Blocks() int64 { return m.DeviceSize / int64(m.BlockSize) }

func (m *Manifest) normalize() {
	if m.PageTuples == 0 {
		m.PageTuples = DefaultPageTuples
	}
}

// validate checks m (normalized) and returns an ErrInvalid error.
func (m *Manifest) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: manifest: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	switch {
	case m.Format == "" || len(m.Format) > maxFormatLen:
		return bad("format must be 1..%d bytes, got %d", maxFormatLen, len(m.Format))
	case m.BlockSize <= 0 || m.BlockSize > maxBlockSize:
		return bad("block size %d out of 1..%d", m.BlockSize, maxBlockSize)
	case m.TupleSize != 8 && m.TupleSize != 16:
		return bad("tuple size %d, want 8 or 16", m.TupleSize)
	case m.PageTuples < 64 || m.PageTuples > 65536 || bits.OnesCount(uint(m.PageTuples)) != 1:
		return bad("page tuples %d, want a power of two in 64..65536", m.PageTuples)
	case m.DeviceSize <= 0 || m.DeviceSize%int64(m.BlockSize) != 0:
		return bad("device size %d is not a positive multiple of block size %d", m.DeviceSize, m.BlockSize)
	case m.Blocks() > MaxPages*int64(m.PageTuples):
		return bad("device size %d: %d blocks need %d pages of %d tuples; a volume may have at most %d pages (%d blocks)",
			m.DeviceSize, m.Blocks(), (m.Blocks()+int64(m.PageTuples)-1)/int64(m.PageTuples), m.PageTuples,
			MaxPages, MaxPages*int64(m.PageTuples))
	case len(m.DeviceID) > maxDeviceIDLen:
		return bad("device id longer than %d bytes", maxDeviceIDLen)
	case len(m.Tool) > maxDeviceIDLen:
		return bad("tool longer than %d bytes", maxDeviceIDLen)
	case (m.KeyCheck == "") != (m.VolumeUID == ""):
		return bad("key check and volume uid must be given together")
	case m.KeyCheck != "" && !isHex128(m.KeyCheck):
		return bad("key check %q is not 32 hex digits", m.KeyCheck)
	case m.VolumeUID != "" && !isHex128(m.VolumeUID):
		return bad("volume uid %q is not 32 hex digits", m.VolumeUID)
	}
	return nil
}

// manifestJSON is the stored form. Field names are part of the schema.
type manifestJSON struct {
	Kind          string    `json:"kind"`
	Schema        int       `json:"schema"`
	Format        string    `json:"format"`
	BlockSize     int       `json:"block_size"`
	TupleSize     int       `json:"tuple_size"`
	SectorSums    bool      `json:"sector_sums"`
	PageTuples    int       `json:"page_tuples"`
	InitialRefTag uint64    `json:"initial_ref_tag"`
	AppTag        uint16    `json:"app_tag"`
	AppTagMask    uint16    `json:"app_tag_mask"`
	DeviceSize    int64     `json:"device_size"`
	DeviceID      string    `json:"device_id"`
	Created       time.Time `json:"created"`
	Tool          string    `json:"tool,omitempty"`
	KeyCheck      string    `json:"key_check,omitempty"`
	VolumeUID     string    `json:"volume_uid,omitempty"`
	Features      []string  `json:"features,omitempty"`
}

func encodeManifest(m Manifest) ([]byte, error) {
	return json.Marshal(manifestJSON{
		Kind: manifestKind, Schema: m.Schema, Format: m.Format, BlockSize: m.BlockSize,
		TupleSize: m.TupleSize, SectorSums: m.SectorSums, PageTuples: m.PageTuples,
		InitialRefTag: m.InitialRefTag, AppTag: m.AppTag, AppTagMask: m.AppTagMask,
		DeviceSize: m.DeviceSize, DeviceID: m.DeviceID, Created: m.Created, Tool: m.Tool,
		KeyCheck: m.KeyCheck, VolumeUID: m.VolumeUID, Features: m.Features,
	})
}

// decodeManifest parses and validates a stored manifest.
func decodeManifest(volume string, b []byte) (Manifest, error) {
	corrupt := func(reason string) error {
		return &CorruptError{Volume: volume, Record: "manifest", Reason: reason}
	}
	if len(b) > maxManifestBytes {
		return Manifest{}, corrupt(fmt.Sprintf("%d bytes, limit %d", len(b), maxManifestBytes))
	}
	var j manifestJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return Manifest{}, corrupt(err.Error())
	}
	if j.Kind != manifestKind {
		return Manifest{}, corrupt(fmt.Sprintf("kind %q, want %q", j.Kind, manifestKind))
	}
	if j.Schema > SchemaVersion {
		return Manifest{}, fmt.Errorf("%w: volume %q: schema version %d is newer than %d", ErrUnsupported, volume, j.Schema, SchemaVersion)
	}
	if j.Schema == oldKeyedSchema {
		return Manifest{}, fmt.Errorf("%w: volume %q: keyed volume of schema version %d, written by a development build that did not seal the tag pages of unwritten blocks (a deleted tag page could not be detected); protect it again with its key (difctl protect --reprotect)", ErrUnsupported, volume, j.Schema)
	}
	if j.Schema < 1 {
		return Manifest{}, corrupt(fmt.Sprintf("schema version %d", j.Schema))
	}
	m := Manifest{
		Format: j.Format, BlockSize: j.BlockSize, TupleSize: j.TupleSize, SectorSums: j.SectorSums,
		PageTuples: j.PageTuples, InitialRefTag: j.InitialRefTag, AppTag: j.AppTag, AppTagMask: j.AppTagMask,
		DeviceSize: j.DeviceSize, DeviceID: j.DeviceID, Schema: j.Schema, Created: j.Created, Tool: j.Tool,
		KeyCheck: j.KeyCheck, VolumeUID: j.VolumeUID, Features: j.Features,
	}
	if err := m.validate(); err != nil {
		return Manifest{}, corrupt(err.Error())
	}
	if m.Schema < RunsSchemaVersion && m.Schema != MirrorSchemaVersion && (m.KeyCheck != "") != (m.Schema >= KeyedSchemaVersion) {
		return Manifest{}, corrupt(fmt.Sprintf("schema version %d with key check %q: keyed volumes are version %d", m.Schema, m.KeyCheck, KeyedSchemaVersion))
	}
	if len(m.Features) > 0 && m.Schema < RunsSchemaVersion {
		return Manifest{}, corrupt(fmt.Sprintf("features %q in a manifest of schema version %d", m.Features, m.Schema))
	}
	for i, f := range m.Features {
		if !slices.Contains(knownFeatures, f) {
			return Manifest{}, fmt.Errorf("%w: volume %q: feature %q unknown to this version", ErrUnsupported, volume, f)
		}
		if slices.Contains(m.Features[:i], f) {
			return Manifest{}, corrupt(fmt.Sprintf("feature %q listed twice", f))
		}
	}
	return m, nil
}

// compare returns a *ManifestMismatchError for the first field in which the
// stored manifest differs from the given one. Schema, Created and Tool are
// history, not identity, and are not compared; KeyCheck and VolumeUID only
// when the given manifest names them (they are chosen at creation).
func (stored *Manifest) compare(volume string, given *Manifest) error {
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	fields := []struct{ name, s, g string }{
		{"format", strconv.Quote(stored.Format), strconv.Quote(given.Format)},
		{"block_size", strconv.Itoa(stored.BlockSize), strconv.Itoa(given.BlockSize)},
		{"tuple_size", strconv.Itoa(stored.TupleSize), strconv.Itoa(given.TupleSize)},
		{"sector_sums", strconv.FormatBool(stored.SectorSums), strconv.FormatBool(given.SectorSums)},
		{"page_tuples", strconv.Itoa(stored.PageTuples), strconv.Itoa(given.PageTuples)},
		{"initial_ref_tag", u(stored.InitialRefTag), u(given.InitialRefTag)},
		{"app_tag", fmt.Sprintf("%#04x", stored.AppTag), fmt.Sprintf("%#04x", given.AppTag)},
		{"app_tag_mask", fmt.Sprintf("%#04x", stored.AppTagMask), fmt.Sprintf("%#04x", given.AppTagMask)},
		{"device_size", i(stored.DeviceSize), i(given.DeviceSize)},
		{"device_id", strconv.Quote(stored.DeviceID), strconv.Quote(given.DeviceID)},
	}
	if given.KeyCheck != "" || given.VolumeUID != "" {
		fields = append(fields,
			struct{ name, s, g string }{"key_check", strconv.Quote(stored.KeyCheck), strconv.Quote(given.KeyCheck)},
			struct{ name, s, g string }{"volume_uid", strconv.Quote(stored.VolumeUID), strconv.Quote(given.VolumeUID)})
	}
	for _, f := range fields {
		if f.s != f.g {
			return &ManifestMismatchError{Volume: volume, Field: f.name, Stored: f.s, Given: f.g}
		}
	}
	return nil
}

// legacySchema returns the schema version of a volume of version 6 or
// older with manifest m once it has no mirror legs.
func (m *Manifest) legacySchema() int {
	if m.KeyCheck != "" {
		return SealedSchemaVersion
	}
	return DenseSchemaVersion
}

// HasFeature reports whether the volume has feature f (a Feature*
// constant). A volume of version 6 with mirror legs has
// FeatureMirrorLegs.
func (m *Manifest) HasFeature(f string) bool {
	return slices.Contains(m.Features, f) || f == FeatureMirrorLegs && m.Schema == MirrorSchemaVersion
}

// Keyed reports whether the manifest describes a keyed volume.
func (m *Manifest) Keyed() bool { return m.KeyCheck != "" }

func isHex128(s string) bool {
	if len(s) != 32 {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
