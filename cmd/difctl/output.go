package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// schemaVersion is stamped on every JSON line; see SCHEMA.md. Adding a
// field or a record type keeps it; renaming, removing or changing the
// meaning of a field bumps it.
const schemaVersion = "difctl/v1"

// globalOptions are the root's persistent flags. Every command's options
// struct embeds a copy, taken when the command runs.
type globalOptions struct {
	JSON  bool // --json: JSON Lines on stdout instead of text
	Quiet bool // --quiet: nothing but errors (text results are dropped)
	// Args is the command line after "difctl", for the files that record
	// it (mapfile headers).
	Args []string
	// Key is --key-file/--key-env of the commands on store-backed images
	// (keyflags.go).
	Key keyFlags
}

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
