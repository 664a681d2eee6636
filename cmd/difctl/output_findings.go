package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/scrub"
	"github.com/difctl/difctl/dif"
)

// findingRecord is one block that failed a check: verify, scrub, convert
// and remap write one per failed check.
type findingRecord struct {
	header
	LBA       int64  `json:"lba"`                 // the block
	Kind      string `json:"kind"`                // guard, app-tag, ref-tag, storage-tag, sector-crc, torn, io, unwritten-data
	Expected  string `json:"expected,omitempty"`  // computed value, hex, zero-padded to the field's width
	Actual    string `json:"actual,omitempty"`    // stored value, same form
	Transient bool   `json:"transient,omitempty"` // failed, then passed when read again
	Resolved  bool   `json:"resolved,omitempty"`  // scrub --errors-only: an open finding that passes now
	Error     string `json:"error,omitempty"`     // the cause, for io
	// Repair is what the repair stage did: repaired (Repaired true),
	// repairable (a copy that verifies is in Source) or unrepairable
	// (Source lists the sources tried); Leg is the mirror leg repaired.
	Repaired bool   `json:"repaired,omitempty"`
	Repair   string `json:"repair,omitempty"`
	Source   string `json:"source,omitempty"`
	Leg      *int   `json:"leg,omitempty"`
}

func (*findingRecord) recordType() string { return "finding" }

// summaryRecord closes a check of a range of blocks.
type summaryRecord struct {
	header
	Command       string           `json:"command"`               // verify, scrub, convert, remap
	Image         string           `json:"image"`                 // the image (data file of a DIX pair)
	Metadata      string           `json:"metadata,omitempty"`    // the metadata file of a DIX pair
	Store         string           `json:"store,omitempty"`       // the store, for store-backed images
	KeyedCheck    string           `json:"keyed_check,omitempty"` // keyed volumes: checked, or skipped (no key given)
	Seal          string           `json:"seal,omitempty"`        // keyed volumes with the key: ok, mismatch, or none (a store from before seals)
	SealGen       uint64           `json:"seal_generation,omitempty"`
	Format        string           `json:"format"` // dif text form
	Start         int64            `json:"start"`  // first LBA checked
	Blocks        int64            `json:"blocks"` // blocks checked
	OK            int64            `json:"ok"`
	Failed        int64            `json:"failed"`                 // blocks failing at least one check
	Unwritten     int64            `json:"unwritten"`              // all-ones tags: never written or discarded
	Escaped       int64            `json:"escaped"`                // app tag 0xffff: not checked
	Transient     int64            `json:"transient"`              // failed, then passed a re-read (counted in ok)
	Repaired      int64            `json:"repaired,omitempty"`     // failed, then repaired from a verified copy (counted in ok)
	Repairable    int64            `json:"repairable,omitempty"`   // failed checks a repair source has a verified copy for
	Unrepairable  int64            `json:"unrepairable,omitempty"` // failed checks no repair source has one for
	FailedByField map[string]int64 `json:"failed_by_field"`        // failed checks per kind
	Seconds       float64          `json:"seconds"`

	sealErr error // a *blockdev.SealError (checkSeal)
}

func (*summaryRecord) recordType() string { return "summary" }

// checkSeal checks the seal of a keyed volume opened with its key
// (blockdev.Volume.CheckSeal) into rec: a mismatch is kept for summary to
// report as an integrity failure; other errors are returned.
func checkSeal(v *blockdev.Volume, rec *summaryRecord) error {
	if !v.KeyedChecked() {
		return nil
	}
	gen, ok, err := v.CheckSeal()
	switch {
	case errors.Is(err, blockdev.ErrSealMismatch):
		rec.Seal, rec.SealGen, rec.sealErr = "mismatch", gen, err
	case err != nil:
		return err
	case !ok:
		rec.Seal = "none"
	default:
		rec.Seal, rec.SealGen = "ok", gen
	}
	return nil
}

// kindNames are the human names of the kinds of failure.
var kindNames = map[blockdev.Kind]string{
	blockdev.KindGuard:      "guard",
	blockdev.KindAppTag:     "app tag",
	blockdev.KindRefTag:     "ref tag",
	blockdev.KindStorageTag: "storage tag",
	blockdev.KindSectorSum:  "sector checksum",
	blockdev.KindTorn:       "torn write",
	blockdev.KindIO:         "unreadable",
	// data in an unwritten block
	blockdev.KindUnwrittenData: "data in unwritten block",
	blockdev.KindKeyedTag:      "keyed tag",
}

func kindName(k blockdev.Kind) string {
	if n, ok := kindNames[k]; ok {
		return n
	}
	return string(k)
}

// findings writes the problems a check reports, as text lines or finding
// records, and counts them. Write errors are kept for the caller, since the
// report callback of a CheckRun cannot return one.
type findings struct {
	out    *output
	f      dif.Format
	byKind map[string]int64
	err    error
	// Text output lists maxTextFindings findings, then counts the rest in
	// hidden; the summary says where they all are (more).
	shown, hidden int64
	more          string
	// The failed checks a repair source has a verified copy for, and
	// those none has.
	repairable, unrepairable int64
	// log, if not nil, gets every finding and the summary too, as text:
	// serve's log, for a check its control socket runs (served.findingsLog).
	log *findings
}

func newFindings(out *output, f dif.Format) *findings {
	return &findings{out: out, f: f, byKind: map[string]int64{}, more: "--json lists them all"}
}

// widths returns the width in bits of the values of a kind of failure.
func (fw *findings) width(k blockdev.Kind) int {
	switch k {
	case blockdev.KindGuard, blockdev.KindTorn:
		return fw.f.Guard().Bits()
	case blockdev.KindAppTag:
		return 16
	case blockdev.KindRefTag:
		return fw.f.RefTagBits()
	case blockdev.KindStorageTag:
		return fw.f.StorageTagBits()
	case blockdev.KindSectorSum:
		return 32
	}
	return 0
}

// values returns the expected and stored values of p as hex strings.
func (fw *findings) values(p blockdev.Problem) (expected, actual string) {
	if p.Kind == blockdev.KindIO {
		return "", ""
	}
	if kt := (*blockdev.KeyedTagError)(nil); errors.As(p.Err, &kt) {
		return keyedValues(kt)
	}
	var hiE, hiA uint16
	var ce *dif.CheckError
	if errors.As(p.Err, &ce) {
		hiE, hiA = ce.ExpectedHigh, ce.ActualHigh
	}
	w := fw.width(p.Kind)
	return hexWidth(hiE, p.Expected, w), hexWidth(hiA, p.Actual, w)
}

func (fw *findings) report(p blockdev.Problem) {
	if fw.log != nil {
		fw.log.report(p)
	}
	if !p.Passes() {
		fw.byKind[string(p.Kind)]++
	}
	switch p.Repair {
	case blockdev.RepairAvailable:
		fw.repairable++
	case blockdev.RepairUnavailable:
		fw.unrepairable++
	}
	if fw.err != nil {
		return
	}
	exp, act := fw.values(p)
	if fw.out.json {
		r := &findingRecord{LBA: p.LBA, Kind: string(p.Kind), Expected: exp, Actual: act, Transient: p.Transient}
		if (p.Kind == blockdev.KindIO || p.Kind == blockdev.KindKeyedTag) && p.Err != nil {
			r.Error = oneLine(p.Err.Error())
		}
		if p.Repair != blockdev.RepairNone {
			leg := p.Leg
			r.Repaired, r.Repair, r.Source, r.Leg = p.Repair == blockdev.RepairRepaired, p.Repair.String(), p.Source, &leg
		}
		fw.err = fw.out.emit(r)
		return
	}
	if fw.shown >= maxTextFindings {
		fw.hidden++
		return
	}
	fw.shown++
	var b strings.Builder
	fmt.Fprintf(&b, "LBA %d: %s", p.LBA, kindName(p.Kind))
	switch p.Kind {
	case blockdev.KindIO, blockdev.KindTorn, blockdev.KindUnwrittenData, blockdev.KindKeyedTag:
	default:
		b.WriteString(" mismatch")
	}
	if p.Transient {
		b.WriteString(" (transient: passed when read again)")
	}
	switch p.Kind {
	case blockdev.KindIO:
		if p.Err != nil {
			fmt.Fprintf(&b, ": %s", oneLine(p.Err.Error()))
		}
	case blockdev.KindUnwrittenData:
		b.WriteString(": unwritten (discarded or never written) but not zeros on the device")
	case blockdev.KindKeyedTag:
		b.WriteString(keyedText(p))
	default:
		fmt.Fprintf(&b, ": expected 0x%s, stored 0x%s", exp, act)
	}
	b.WriteString(repairText(p))
	b.WriteByte('\n')
	_, fw.err = io.WriteString(fw.out.w, b.String())
}

// summary writes the summary of a check and returns the error that ends
// the command: nil when clean, an integrityError when blocks failed.
func (fw *findings) summary(rec *summaryRecord, st blockdev.RunStats, elapsed time.Duration) error {
	if fw.log != nil {
		fw.log.byKind = fw.byKind
		_ = fw.log.summary(rec, st, elapsed) // the verdict is fw's
	}
	if fw.err != nil {
		return fmt.Errorf("write output: %w", fw.err)
	}
	rec.Blocks, rec.OK, rec.Failed = st.Blocks, st.OK, st.Failed
	rec.Unwritten, rec.Escaped, rec.Transient, rec.Repaired = st.Unwritten, st.Escaped, st.Transient, st.Repaired
	rec.FailedByField = fw.byKind
	rec.Repairable, rec.Unrepairable = fw.repairable, fw.unrepairable
	rec.Seconds = elapsed.Seconds()
	name := rec.Image
	if rec.Metadata != "" {
		name += " + " + rec.Metadata
	}
	if fw.out.json {
		if err := fw.out.emit(rec); err != nil {
			return fmt.Errorf("write output: %w", err)
		}
	} else {
		var b strings.Builder
		fmt.Fprintf(&b, "%s: %d blocks checked (%s", name, st.Blocks, rec.Format)
		if rec.Start != 0 {
			fmt.Fprintf(&b, ", from LBA %d", rec.Start)
		}
		fmt.Fprintf(&b, "): %d ok, %d failed", st.OK, st.Failed)
		if len(fw.byKind) > 0 {
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(fw.byKind)) {
				parts = append(parts, fmt.Sprintf("%s %d", kindName(blockdev.Kind(k)), fw.byKind[k]))
			}
			fmt.Fprintf(&b, " (%s)", strings.Join(parts, ", "))
		}
		fmt.Fprintf(&b, ", %d unwritten, %d escaped", st.Unwritten, st.Escaped)
		if st.Transient > 0 {
			fmt.Fprintf(&b, ", %d transient", st.Transient)
		}
		if st.Repaired > 0 {
			fmt.Fprintf(&b, ", %d repaired", st.Repaired)
		}
		if rec.Repairable > 0 {
			fmt.Fprintf(&b, ", %d failed checks repairable", rec.Repairable)
		}
		if rec.Unrepairable > 0 {
			fmt.Fprintf(&b, ", %d failed checks unrepairable", rec.Unrepairable)
		}
		if rec.KeyedCheck == keyedChecked {
			b.WriteString(", keyed tags checked")
		}
		b.WriteByte('\n')
		if rec.KeyedCheck == keyedSkipped {
			b.WriteString(keyedSkippedNote)
		}
		if rec.sealErr != nil {
			fmt.Fprintf(&b, "%s\n", shortMessage(rec.sealErr))
		}
		if fw.hidden > 0 {
			fmt.Fprintf(&b, "%d more findings not listed after the first %d; %s\n", fw.hidden, maxTextFindings, fw.more)
		}
		if _, err := io.WriteString(fw.out.w, b.String()); err != nil {
			return fmt.Errorf("write output: %w", err)
		}
	}
	if st.Failed > 0 {
		return &integrityError{msg: fmt.Sprintf("%s: %d of %d blocks failed verification", name, st.Failed, st.Blocks), err: rec.sealErr}
	}
	if rec.sealErr != nil {
		return &integrityError{msg: name, err: rec.sealErr}
	}
	return nil
}

// maxTextFindings bounds the finding lines of text output; the rest are
// counted in the summary, which says where the full list is.
const maxTextFindings = 100

// keyedValues are the expected (computed) and stored tags of a keyed-tag
// failure, in hex; empty where there is none.
func keyedValues(kt *blockdev.KeyedTagError) (expected, actual string) {
	if kt.Reason == "mismatch" {
		expected = hexTag(kt.Expected)
	}
	if kt.Gen != 0 {
		actual = hexTag(kt.Actual)
	}
	return expected, actual
}

// keyedText is the text of a keyed-tag finding after "LBA N: keyed tag".
func keyedText(p blockdev.Problem) string {
	var kt *blockdev.KeyedTagError
	if !errors.As(p.Err, &kt) {
		return " mismatch"
	}
	switch kt.Reason {
	case "mismatch":
		return fmt.Sprintf(" mismatch: expected 0x%s, stored 0x%s (generation %d): the data is not what was written here", hexTag(kt.Expected), hexTag(kt.Actual), kt.Gen)
	case "page-mac":
		return " page fails its MAC: the tag page holding this block's tags, or the tuple page it seals, was edited, forged or copied from elsewhere (an older block put back in it cannot be ruled out)"
	case "missing":
		return " missing: the block is written but has no keyed tag"
	case "page-missing":
		return " page missing: the tag page holding this block's tags was deleted from the store (every tag page of a keyed volume is recorded from protect on)"
	case "unwritten":
		return " on an unwritten block: the store says unwritten, the keyed tags say written"
	}
	return ": " + kt.Reason
}

// reportFinding writes a scrub finding: failures as verify does, and
// findings an errors-only scrub closed as resolved.
func (fw *findings) reportFinding(fd scrub.Finding) {
	if fd.State == scrub.FindingRecheckedOK && !fd.Transient {
		if fw.log != nil {
			fw.log.reportFinding(fd)
		}
		if fw.err != nil {
			return
		}
		exp, act := fw.values(fd.Problem())
		if fw.out.json {
			fw.err = fw.out.emit(&findingRecord{LBA: fd.LBA, Kind: string(fd.Kind), Expected: exp, Actual: act, Resolved: true})
			return
		}
		_, fw.err = fmt.Fprintf(fw.out.w, "LBA %d: %s: passes now, finding marked rechecked-ok\n", fd.LBA, kindName(fd.Kind))
		return
	}
	fw.report(fd.Problem())
}

// repairText is what the repair stage did with a finding's block, for its
// line of text.
func repairText(p blockdev.Problem) string {
	switch p.Repair {
	case blockdev.RepairRepaired:
		return fmt.Sprintf("; repaired from %s", p.Source)
	case blockdev.RepairServed:
		return fmt.Sprintf("; a verified copy from %s was returned, not written (%s)", p.Source, oneLine(fmt.Sprint(p.RepairErr)))
	case blockdev.RepairAvailable:
		return fmt.Sprintf("; repairable from %s (scrub --repair)", p.Source)
	case blockdev.RepairUnavailable:
		return fmt.Sprintf("; unrepairable: no copy that verifies in %s", p.Source)
	}
	return ""
}
