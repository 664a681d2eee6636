package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"
)

// Flag value types. They validate in Set, so a bad value is a flag error
// that cobra reports before the command runs, and main maps it to exit 16
// with no code in the command. Later commands add theirs here (block size,
// guard width, PI type, ranges).

// algFlag is one --alg name.
type algFlag struct{ alg *algorithm }

func (f *algFlag) String() string {
	if f.alg == nil {
		return ""
	}
	return f.alg.name
}

func (f *algFlag) Set(s string) error {
	a, err := lookupAlgorithm(s)
	if err != nil {
		return err
	}
	f.alg = a
	return nil
}

func (*algFlag) Type() string { return "alg" }

// algListFlag is a comma-separated list of --alg names; empty means all.
type algListFlag struct{ algs []*algorithm }

func (f *algListFlag) String() string {
	names := make([]string, len(f.algs))
	for i, a := range f.algs {
		names[i] = a.name
	}
	return strings.Join(names, ",")
}

func (f *algListFlag) Set(s string) error {
	for _, name := range splitList(s) {
		a, err := lookupAlgorithm(name)
		if err != nil {
			return err
		}
		f.algs = append(f.algs, a)
	}
	return nil
}

func (*algListFlag) Type() string { return "algs" }

// stringListFlag is a comma-separated list of names, repeatable.
type stringListFlag struct{ list []string }

func (f *stringListFlag) String() string { return strings.Join(f.list, ",") }
func (f *stringListFlag) Set(s string) error {
	f.list = append(f.list, splitList(s)...)
	return nil
}
func (*stringListFlag) Type() string { return "names" }

// sizeFlag is a positive byte count: 4096, 4KiB, 64k, 1MiB, 1MB.
type sizeFlag struct{ n int }

func (f *sizeFlag) String() string { return formatSize(f.n) }
func (f *sizeFlag) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	f.n = n
	return nil
}
func (*sizeFlag) Type() string { return "size" }

// sizeListFlag is a comma-separated list of sizes. The first Set replaces
// the default; later ones (a repeated flag) append.
type sizeListFlag struct {
	sizes []int
	set   bool
}

func (f *sizeListFlag) String() string {
	s := make([]string, len(f.sizes))
	for i, n := range f.sizes {
		s[i] = formatSize(n)
	}
	return strings.Join(s, ",")
}

func (f *sizeListFlag) Set(s string) error {
	if !f.set {
		f.sizes, f.set = nil, true
	}
	for _, e := range splitList(s) {
		n, err := parseSize(e)
		if err != nil {
			return err
		}
		f.sizes = append(f.sizes, n)
	}
	return nil
}

func (*sizeListFlag) Type() string { return "sizes" }

func splitList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// parseSize parses a positive byte count. Units follow go-humanize (KB is
// 1000, KiB is 1024), except that a bare K, M, G or T means KiB, MiB, GiB
// or TiB, as in dd(1): block sizes are powers of two.
func parseSize(s string) (int, error) {
	t := strings.TrimSpace(s)
	var v uint64
	var err error
	if i := len(t) - 1; i > 0 && strings.ContainsRune("kKmMgGtT", rune(t[i])) {
		var m uint64
		m, err = strconv.ParseUint(strings.TrimSpace(t[:i]), 10, 64)
		shift := 10 * (1 + strings.IndexByte("kmgt", t[i]|0x20))
		v = m << shift
		if err == nil && m > math.MaxUint64>>shift {
			err = strconv.ErrRange
		}
	} else {
		v, err = humanize.ParseBytes(t)
	}
	switch {
	case err != nil:
		return 0, fmt.Errorf("invalid size %q", s)
	case v == 0 || v > math.MaxInt32:
		return 0, fmt.Errorf("invalid size %q: want 1 byte to 2 GiB", s)
	}
	return int(v), nil
}

// formatSize writes a byte count the short exact way: 512 B, 4 KiB, 1 MiB.
func formatSize(n int) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

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

// rateFlag is a rate in bytes per second: 100MiB/s, 1GB/s, 500M.
type rateFlag struct{ n int64 }

func (f *rateFlag) String() string {
	if f.n == 0 {
		return ""
	}
	return formatBytes(f.n) + "/s"
}

func (f *rateFlag) Set(s string) error {
	t := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSpace(s), "/s"), "ps")
	if t == "0" || t == "" || strings.EqualFold(t, "unlimited") {
		if t == "" {
			return fmt.Errorf("invalid rate %q (want e.g. 100MiB/s)", s)
		}
		f.n = 0
		return nil
	}
	var v uint64
	var err error
	if i := len(t) - 1; i > 0 && strings.ContainsRune("kKmMgGtT", rune(t[i])) {
		var m uint64
		m, err = strconv.ParseUint(strings.TrimSpace(t[:i]), 10, 64)
		v = m << (10 * (1 + strings.IndexByte("kmgt", t[i]|0x20)))
	} else {
		v, err = humanize.ParseBytes(t)
	}
	if err != nil || v == 0 || v > 1<<50 {
		return fmt.Errorf("invalid rate %q (want e.g. 100MiB/s)", s)
	}
	f.n = int64(v)
	return nil
}

func (*rateFlag) Type() string { return "rate" }

// blocksFlags are --lba N and --count M: the blocks N to N+M-1.
type blocksFlags struct{ lba, count lbaFlag }

// register adds --lba and --count to cmd, with their help texts.
func (b *blocksFlags) register(cmd *cobra.Command, lbaUse, countUse string) {
	f := cmd.Flags()
	f.Var(&b.lba, "lba", lbaUse)
	f.Var(&b.count, "count", countUse)
}

// blocks returns the blocks the flags name, and whether --lba was given:
// --count needs --lba, and defaults to 1 unless required, when both must
// be given.
func (b *blocksFlags) blocks(required bool) (lba, count int64, set bool, err error) {
	switch {
	case required && (!b.lba.set || !b.count.set):
		return 0, 0, false, usageErrorf("--lba and --count are required")
	case b.count.set && !b.lba.set:
		return 0, 0, false, usageErrorf("--count needs --lba")
	case b.count.set && b.count.v == 0:
		return 0, 0, false, usageErrorf("--count must be at least 1")
	case !b.lba.set:
		return 0, 0, false, nil
	case !b.count.set:
		return b.lba.v, 1, true, nil
	}
	return b.lba.v, b.count.v, true, nil
}
