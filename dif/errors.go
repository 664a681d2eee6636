package dif

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrIntegrity is matched (errors.Is) by every integrity failure: each
// *CheckError, each *VerifyError and the per-field sentinels below.
var ErrIntegrity = errors.New("dif: integrity check failed")

// Per-field sentinels; each also matches ErrIntegrity.
var (
	ErrGuard      error = &fieldSentinel{"dif: guard mismatch"}
	ErrAppTag     error = &fieldSentinel{"dif: application tag mismatch"}
	ErrRefTag     error = &fieldSentinel{"dif: reference tag mismatch"}
	ErrStorageTag error = &fieldSentinel{"dif: storage tag mismatch"}
)

// Sentinels for bad calls (never integrity failures). Errors returned for
// bad buffers and bad parameters wrap them with the details.
var (
	// ErrBuffer: a buffer's length does not match the format and layout.
	ErrBuffer = errors.New("dif: buffer does not match the format")
	// ErrParams: a Params value or an argument does not fit the format.
	ErrParams = errors.New("dif: invalid parameters")
)

type fieldSentinel struct{ msg string }

func (s *fieldSentinel) Error() string { return s.msg }
func (s *fieldSentinel) Unwrap() error { return ErrIntegrity }

// detailError is a message wrapping a sentinel without repeating its text.
type detailError struct {
	msg string
	err error
}

func (e *detailError) Error() string { return e.msg }
func (e *detailError) Unwrap() error { return e.err }

func bufErr(format string, args ...any) error {
	return &detailError{msg: "dif: " + fmt.Sprintf(format, args...), err: ErrBuffer}
}

func paramErr(format string, args ...any) error {
	return &detailError{msg: "dif: " + fmt.Sprintf(format, args...), err: ErrParams}
}

// Field names a part of a block: the PI fields that Verify checks, and for
// Inject also the data and the metadata bytes outside the tuple.
type Field uint8

// The fields.
const (
	FieldGuard      Field = iota + 1 // the guard (CRC)
	FieldAppTag                      // the application tag
	FieldRefTag                      // the reference tag (low bits of the tag space)
	FieldStorageTag                  // the storage tag (high bits of the tag space)
	FieldData                        // Inject only: the block's data
	FieldMetadata                    // Inject only: metadata bytes outside the tuple
)

var fieldNames = [...]string{"", "guard", "app tag", "ref tag", "storage tag", "data", "metadata"}

// String returns a short name: "guard", "app tag", "ref tag", "storage tag",
// "data" or "metadata".
func (f Field) String() string {
	if int(f) < len(fieldNames) && f != 0 {
		return fieldNames[f]
	}
	return "Field(" + strconv.Itoa(int(f)) + ")"
}

func (f Field) sentinel() error {
	switch f {
	case FieldGuard:
		return ErrGuard
	case FieldAppTag:
		return ErrAppTag
	case FieldRefTag:
		return ErrRefTag
	case FieldStorageTag:
		return ErrStorageTag
	}
	return ErrIntegrity
}

// CheckError is one failed check of one block. It matches ErrIntegrity and
// the sentinel of its field (ErrGuard, ErrAppTag, ErrRefTag, ErrStorageTag).
type CheckError struct {
	Block    int    // index of the block in the run
	LBA      int64  // Params.LBA + Block
	Field    Field  // FieldGuard, FieldAppTag, FieldRefTag or FieldStorageTag
	Expected uint64 // computed value (app tag: Params.AppTag, compared under Params.AppMask)
	Actual   uint64 // stored value (whole field, unmasked)
	// ExpectedHigh and ActualHigh hold bits 64 to 79 of a tag wider than 64
	// bits (only the 80-bit tag space of Guard32); zero otherwise.
	ExpectedHigh, ActualHigh uint16
}

func (e *CheckError) Error() string {
	var b strings.Builder
	b.WriteString("dif: block ")
	b.WriteString(strconv.Itoa(e.Block))
	b.WriteString(" (LBA ")
	b.WriteString(strconv.FormatInt(e.LBA, 10))
	b.WriteString("): ")
	b.WriteString(e.Field.String())
	b.WriteString(" mismatch: expected ")
	b.WriteString(hex80(e.ExpectedHigh, e.Expected))
	b.WriteString(", stored ")
	b.WriteString(hex80(e.ActualHigh, e.Actual))
	return b.String()
}

// Unwrap returns the field's sentinel, which matches ErrIntegrity.
func (e *CheckError) Unwrap() error { return e.Field.sentinel() }

func hex80(hi uint16, lo uint64) string {
	if hi == 0 {
		return "0x" + strconv.FormatUint(lo, 16)
	}
	return fmt.Sprintf("0x%x%016x", hi, lo)
}

// MaxListed is the number of failures a *VerifyError lists; Total counts
// them all. Use VerifyFunc to see every one.
const MaxListed = 64

// VerifyError reports the integrity failures of a run. It matches
// ErrIntegrity, and through Unwrap the listed *CheckErrors: errors.As finds
// the first, errors.Is(err, ErrGuard) says whether a listed failure is a
// guard mismatch.
type VerifyError struct {
	Errors []*CheckError // the first MaxListed failures, in block order
	Total  int           // number of failed checks in the run
	Blocks int           // number of blocks with at least one failed check
}

func (e *VerifyError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "dif: %d integrity failure", e.Total)
	if e.Total != 1 {
		b.WriteByte('s')
	}
	fmt.Fprintf(&b, " in %d block", e.Blocks)
	if e.Blocks != 1 {
		b.WriteByte('s')
	}
	if len(e.Errors) > 0 {
		b.WriteString("; first: ")
		b.WriteString(strings.TrimPrefix(e.Errors[0].Error(), "dif: "))
	}
	return b.String()
}

// Is reports whether target is ErrIntegrity.
func (e *VerifyError) Is(target error) bool { return target == ErrIntegrity }

// Unwrap returns the listed failures.
func (e *VerifyError) Unwrap() []error {
	errs := make([]error, len(e.Errors))
	for i, ce := range e.Errors {
		errs[i] = ce
	}
	return errs
}
