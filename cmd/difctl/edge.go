package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"github.com/difctl/difctl/blockdev/scrub"
	"github.com/difctl/difctl/store"
	"github.com/spf13/cobra"
)

// Checks and helpers shared by the commands at the edges: flags validated
// before a command runs, images refused before a blocking open, the
// version, and the command line recorded in output files.

// checkCommonFlags runs before every command (the root's
// PersistentPreRunE): a --store URL with a scheme difctl does not know is
// a usage error (exit 16), as any other bad flag value, not an operational
// one found when the store is opened.
func checkCommonFlags(cmd *cobra.Command) error {
	if f := cmd.Flags().Lookup("store"); f != nil && f.Changed {
		if err := checkStoreURL(f.Value.String()); err != nil {
			return err
		}
	}
	return nil
}

// checkStoreURL accepts what store.Open accepts: pebble:PATH, mem:, the
// schemes of the backends difctl links (etcd://...) or a plain path
// (store.Open's rule for telling a scheme from a path).
func checkStoreURL(url string) error {
	if url == "" {
		return usageErrorf("--store must not be empty")
	}
	scheme, _, ok := strings.Cut(url, ":")
	if !ok || strings.ContainsAny(scheme, `/\.`) || len(scheme) < 2 {
		return nil // a plain path
	}
	schemes := store.Schemes()
	if slices.Contains(schemes, scheme) {
		return nil
	}
	return usageErrorf("--store %q: unknown scheme %q (want one of %s)", store.RedactURL(url), scheme, strings.Join(schemes, ", "))
}

// checkImageFile refuses a path that is neither a regular file nor a block
// device, before any open: opening a FIFO blocks until a writer comes, and
// a character device or socket is no image.
func checkImageFile(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			pe.Op = "open" // as the open would have said
		}
		return err
	}
	m := fi.Mode()
	switch {
	case m.IsRegular(), m&fs.ModeDevice != 0 && m&fs.ModeCharDevice == 0:
		return nil
	case m.IsDir():
		return &fs.PathError{Op: "open", Path: path, Err: errors.New("is a directory")}
	}
	kind := "special file"
	switch {
	case m&fs.ModeNamedPipe != 0:
		kind = "FIFO"
	case m&fs.ModeSocket != 0:
		kind = "socket"
	case m&fs.ModeCharDevice != 0:
		kind = "character device"
	}
	return fmt.Errorf("%s is a %s, not an image: want a regular file or a block device", path, kind)
}

// versionString describes the build, from the module and VCS information
// the Go toolchain stamps into the binary.
func versionString() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (no build information)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		v += " " + rev
		if dirty {
			v += "+dirty"
		}
		if at != "" {
			v += " " + at
		}
	}
	return fmt.Sprintf("%s %s %s/%s", v, bi.GoVersion, runtime.GOOS, runtime.GOARCH)
}

// commandLine is the command line as typed, for the headers of the files
// a command writes (GNU ddrescue mapfiles): arguments that need it are
// quoted for a POSIX shell.
func commandLine(args []string) string {
	parts := []string{"difctl"}
	for _, a := range args {
		parts = append(parts, shellQuote(a))
	}
	return strings.Join(parts, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=+,@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
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

// closeOverwritten closes the open findings of the blocks [lba, lba+n),
// which a write has just replaced whole and made durable: their failures
// are gone with their old contents (state "closed", the log's "resolved:
// repaired, accepted or rewritten"). It returns how many it closed.
func closeOverwritten(tup *store.Tuples, lba, n int64) (int, error) {
	if n <= 0 {
		return 0, nil
	}
	var open []store.Finding
	for f, err := range tup.Findings(store.FindingQuery{LBA: lba, N: n, State: store.FindingOpen}) {
		if err != nil {
			return 0, err
		}
		// Only findings wholly inside the rewritten blocks.
		if f.LBA >= lba && f.LBA+max(f.N, 1) <= lba+n {
			open = append(open, f)
		}
	}
	for i, f := range open {
		if _, err := tup.SetFindingState(f.LBA, f.Field, scrub.FindingClosed, i == len(open)-1); err != nil {
			return i, err
		}
	}
	return len(open), nil
}

// emptyImage is the error of every command that checks an image of zero
// bytes (exit 8): there is no block to check, which is not "clean".
func emptyImage(path string) error {
	return fmt.Errorf("%s is empty (0 bytes): it has no blocks to check", path)
}

// listBlockSizeFlag is the unit of a badblocks list (badblocks -b): a power
// of two from 512 bytes to 64 KiB.
type listBlockSizeFlag struct{ n int }

func (f *listBlockSizeFlag) String() string {
	if f.n == 0 {
		return ""
	}
	return strconv.Itoa(f.n)
}

func (f *listBlockSizeFlag) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	if n < 512 || n > 1<<16 || n&(n-1) != 0 {
		return fmt.Errorf("block size %s is not a power of two from 512 to 64KiB", s)
	}
	f.n = n
	return nil
}

func (*listBlockSizeFlag) Type() string { return "size" }

// maxTextFindings bounds the finding lines of text output; the rest are
// counted in the summary, which says where the full list is.
const maxTextFindings = 100

// zeroBlock is compared against by isZeroBlock; blocks are at most 64 KiB.
var zeroBlock [1 << 16]byte

// isZeroBlock reports whether a block's data is all zeros.
func isZeroBlock(p []byte) bool {
	return len(p) <= len(zeroBlock) && bytes.Equal(p, zeroBlock[:len(p)])
}
