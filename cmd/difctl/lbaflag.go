package main

import "strconv"

// lbaFlag is an LBA or a block count: a non-negative int64 (the library's
// LBA type), in decimal or with a 0x, 0o or 0b prefix, as uintFlag parses.
type lbaFlag struct {
	v   int64
	set bool
}

func (f *lbaFlag) String() string {
	if !f.set {
		return ""
	}
	return strconv.FormatInt(f.v, 10)
}

func (f *lbaFlag) Set(s string) error {
	v, err := parseUint(s, 63) // 63 bits: every value fits an int64
	if err != nil {
		return err
	}
	f.v, f.set = int64(v), true
	return nil
}

func (*lbaFlag) Type() string { return "uint" }
