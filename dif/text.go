package dif

import (
	"strconv"
	"strings"
)

// String returns the canonical text form of f (see Parse): the sizes, then
// only the options that differ from their defaults, in the order guard,
// type, position, sts, layout. Parse(f.String()) == f for every valid f.
// The zero Format prints as "invalid".
func (f Format) String() string {
	if !f.Valid() {
		return "invalid"
	}
	var b strings.Builder
	b.Grow(40)
	b.WriteString(strconv.Itoa(int(f.bs)))
	b.WriteByte('+')
	b.WriteString(strconv.Itoa(int(f.md)))
	if f.guard != Guard16 {
		b.WriteByte(':')
		b.WriteString(f.guard.String())
	}
	if f.typ != Type1 {
		b.WriteByte(':')
		b.WriteString(f.typ.String())
	}
	if f.pos != PILast {
		b.WriteByte(':')
		b.WriteString(f.pos.String())
	}
	if f.sts != 0 {
		b.WriteString(":sts=")
		b.WriteString(strconv.Itoa(int(f.sts)))
	}
	if f.layout != Interleaved {
		b.WriteByte(':')
		b.WriteString(f.layout.String())
	}
	return b.String()
}

// Parse parses the text form of a format:
//
//	format   = size "+" metadata { ":" option }
//	size     = decimal                                 data bytes per block
//	metadata = decimal                                 metadata bytes per block
//	option   = guard | type | position | sts | layout  each at most once, any order
//	guard    = "crc16" | "crc32" | "crc64"             default crc16
//	type     = "type0" | "type1" | "type2" | "type3"   default type1
//	position = "pi-last" | "pi-first"                  default pi-last
//	sts      = "sts=" decimal                          storage tag bits, default 0
//	layout   = "interleaved" | "dix"                   default interleaved
//	decimal  = "0" | [1-9][0-9]*                       at most 6 digits
//
// Tokens are lower case, without spaces. Examples: "512+8",
// "4096+16:crc64", "4096+64:crc32:type3:pi-first:sts=16:dix". Options
// equal to their defaults may be written out; String omits them.
// Errors are *FormatError values.
func Parse(s string) (Format, error) {
	head, rest, _ := strings.Cut(s, ":")
	bsText, mdText, ok := strings.Cut(head, "+")
	if !ok {
		return Format{}, &FormatError{Field: "text", Value: s, Reason: `want "<block size>+<metadata size>[:option...]"`}
	}
	var o Options
	var err error
	if o.BlockSize, err = parseDecimal("block size", bsText); err != nil {
		return Format{}, err
	}
	if o.MetadataSize, err = parseDecimal("metadata size", mdText); err != nil {
		return Format{}, err
	}
	if o.MetadataSize == 0 {
		// NewFormat reads 0 as "the tuple size"; the text form is explicit.
		return Format{}, &FormatError{Field: "metadata size", Value: mdText, Reason: "must be at least the tuple size"}
	}
	o.Type = Type1
	var seen [5]bool // guard, type, position, sts, layout
	for rest != "" {
		var tok string
		tok, rest, _ = strings.Cut(rest, ":")
		slot, err := parseOption(tok, &o)
		if err != nil {
			return Format{}, err
		}
		if seen[slot] {
			return Format{}, &FormatError{Field: optionNames[slot], Value: tok, Reason: "given twice"}
		}
		seen[slot] = true
	}
	if strings.HasSuffix(s, ":") {
		return Format{}, &FormatError{Field: "text", Value: s, Reason: "empty option"}
	}
	return NewFormat(o)
}

var optionNames = [...]string{"guard", "type", "position", "storage tag bits", "layout"}

func parseOption(tok string, o *Options) (slot int, err error) {
	switch tok {
	case "crc16":
		o.Guard = Guard16
		return 0, nil
	case "crc32":
		o.Guard = Guard32
		return 0, nil
	case "crc64":
		o.Guard = Guard64
		return 0, nil
	case "type0", "type1", "type2", "type3":
		o.Type = Type(tok[4] - '0')
		return 1, nil
	case "pi-last":
		o.Position = PILast
		return 2, nil
	case "pi-first":
		o.Position = PIFirst
		return 2, nil
	case "interleaved":
		o.Layout = Interleaved
		return 4, nil
	case "dix":
		o.Layout = Separate
		return 4, nil
	}
	if v, ok := strings.CutPrefix(tok, "sts="); ok {
		n, err := parseDecimal("storage tag bits", v)
		o.StorageTagBits = n
		return 3, err
	}
	return 0, &FormatError{Field: "text", Value: tok, Reason: "unknown option (want crc16|crc32|crc64, type0..type3, pi-last|pi-first, sts=N, interleaved|dix)"}
}

func parseDecimal(field, s string) (int, error) {
	if s == "" || len(s) > 6 || (s[0] == '0' && len(s) > 1) {
		return 0, &FormatError{Field: field, Value: s, Reason: "want a decimal number without leading zeros"}
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, &FormatError{Field: field, Value: s, Reason: "want a decimal number without leading zeros"}
		}
		n = n*10 + int(c-'0')
	}
	return n, nil
}

// MarshalText returns f.String(), or an error for the zero Format.
func (f Format) MarshalText() ([]byte, error) {
	if !f.Valid() {
		return nil, &FormatError{Field: "text", Value: "", Reason: "zero Format"}
	}
	return []byte(f.String()), nil
}

// UnmarshalText parses text with Parse.
func (f *Format) UnmarshalText(text []byte) error {
	g, err := Parse(string(text))
	if err != nil {
		return err
	}
	*f = g
	return nil
}
