package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/bits"
	"strconv"
	"strings"

	"github.com/difctl/difctl/dif"
	"github.com/dustin/go-humanize"
)

// schemaVersion is stamped on every JSON line; see SCHEMA.md. Adding a
// field or a record type keeps it; renaming, removing or changing the
// meaning of a field bumps it.
const schemaVersion = "difctl/v1"

// header starts every JSON record. Records embed it first, so "schema"
// and "type" are the first two keys of every line.
type header struct {
	Schema string `json:"schema"`
	Type   string `json:"type"`
}

func (h *header) stamp(typ string) { h.Schema, h.Type = schemaVersion, typ }

// record is a JSON Lines record: a pointer to a struct embedding header
// whose recordType names its "type".
type record interface {
	stamp(typ string)
	recordType() string
}

// errorRecord reports a failure: one per failed item (with the item named),
// and a last one from main when the command itself fails.
type errorRecord struct {
	header
	File     string `json:"file,omitempty"`      // the item that failed, if any
	Error    string `json:"error"`               // one-line cause
	ExitCode int    `json:"exit_code,omitempty"` // set on the final record from main
}

func (*errorRecord) recordType() string { return "error" }

// output writes a command's results to stdout, as text or JSON Lines.
// Commands build one per run:
//
//	out := newOutput(stdout, opts.JSON)
//	if out.json { return out.emit(&fooRecord{...}) }
//	fmt.Fprintf(out.w, ...)
type output struct {
	w    io.Writer
	json bool
	enc  *json.Encoder
}

func newOutput(w io.Writer, jsonLines bool) *output {
	o := &output{w: w, json: jsonLines}
	if jsonLines {
		o.enc = json.NewEncoder(w)
		o.enc.SetEscapeHTML(false)
	}
	return o
}

// emit writes r as one JSON line, stamped with the schema and its type.
func (o *output) emit(r record) error {
	r.stamp(r.recordType())
	return o.enc.Encode(r)
}

// itemError reports the failure of one item of a command that goes on with
// the next: a "difctl: <cause>" line on stderr and, with --json, an error
// record on stdout naming the item.
func (o *output) itemError(stderr io.Writer, item string, err error) {
	fmt.Fprintf(stderr, "difctl: %s\n", shortMessage(err))
	if o.json {
		// A failed write to stdout shows up on the next result write.
		_ = o.emit(&errorRecord{File: item, Error: shortMessage(err)})
	}
}

// displayFormat writes a volume's format without its layout: the tuples of
// a store-backed image are kept apart from the data, which the user need
// not be told in every message.
func displayFormat(s string) string { return strings.TrimSuffix(s, ":dix") }

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

// formatBytes writes a byte count for people: 32 KiB, 1.5 GiB.
func formatBytes(n int64) string { return humanize.IBytes(uint64(n)) }

func guardName(g dif.Guard) string {
	switch g {
	case dif.Guard16:
		return "CRC-16/T10-DIF"
	case dif.Guard32:
		return "CRC-32C"
	case dif.Guard64:
		return "CRC-64/NVME"
	}
	return g.String()
}

// hexWidth formats a value of a field bits wide as zero-padded lower-case
// hexadecimal; hi holds bits 64 to 79 of the 80-bit tags of CRC-32C formats.
func hexWidth(hi uint16, lo uint64, bitsWide int) string {
	if bitsWide > 64 {
		return fmt.Sprintf("%0*x%016x", (bitsWide-64+3)/4, hi, lo)
	}
	if bitsWide <= 0 {
		bitsWide = 64 - bits.LeadingZeros64(lo)
	}
	return fmt.Sprintf("%0*x", (bitsWide+3)/4, lo)
}

// tupleField formats one PI field of t, or "" for data and metadata.
func tupleField(f dif.Format, t dif.Tuple, fd dif.Field) string {
	switch fd {
	case dif.FieldGuard:
		return hexWidth(0, t.Guard, f.Guard().Bits())
	case dif.FieldAppTag:
		return hexWidth(0, uint64(t.AppTag), 16)
	case dif.FieldRefTag:
		return hexWidth(t.RefTagHigh, t.RefTag, f.RefTagBits())
	case dif.FieldStorageTag:
		return hexWidth(t.StorageTagHigh, t.StorageTag, f.StorageTagBits())
	}
	return ""
}

func hexTag(t [16]byte) string { return hex.EncodeToString(t[:]) }
