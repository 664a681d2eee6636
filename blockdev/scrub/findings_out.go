package scrub

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
)

// WriteBadblocks writes bad block ranges as a badblocks(8) list: one
// decimal block number per line, in ascending order, in units of outBlock
// bytes (what `badblocks -b outBlock` prints and `e2fsck -l` reads). The
// ranges are in blocks of blockSize bytes, sorted and non-overlapping
// (BadRanges.Ranges); an output block that holds any bad byte is listed,
// once.
func WriteBadblocks(w io.Writer, bad []blockdev.BlockRange, blockSize, outBlock int) error {
	if blockSize <= 0 || outBlock <= 0 {
		return fmt.Errorf("scrub: badblocks: block sizes %d and %d must be positive", blockSize, outBlock)
	}
	if err := checkRanges(bad); err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	bs, ob := int64(blockSize), int64(outBlock)
	next := int64(0) // first output block not yet written
	var num []byte
	for _, r := range bad {
		first := r.LBA * bs / ob
		last := (r.End()*bs - 1) / ob
		for b := max(first, next); b <= last; b++ {
			num = strconv.AppendInt(num[:0], b, 10)
			num = append(num, '\n')
			if _, err := bw.Write(num); err != nil {
				return fmt.Errorf("scrub: badblocks: %w", err)
			}
		}
		next = max(next, last+1)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("scrub: badblocks: %w", err)
	}
	return nil
}

// MapfileOptions describe the device of a GNU ddrescue mapfile.
type MapfileOptions struct {
	// BlockSize is the size in bytes of the blocks the ranges count.
	// Required.
	BlockSize int
	// Blocks is the size of the device in blocks. Required: the mapfile
	// covers the whole device.
	Blocks int64
	// Start and End are the blocks that were checked; blocks outside
	// [Start, End) are marked non-tried ('?'). Default: End 0 means Blocks,
	// so the whole device was checked.
	Start, End int64
	// Comments are written as comment lines after the first line ("#
	// Mapfile. Created by difctl"), for example "Command line: ...",
	// "Start time: ...". Default none.
	Comments []string
}

// WriteMapfile writes bad block ranges as a GNU ddrescue mapfile (see the
// "Mapfile structure" chapter of the ddrescue manual): heading comments, the
// status line (current position 0, status '+' finished, pass 1), then
// "pos size status" lines in hexadecimal covering the whole device without
// gaps or overlaps: '-' (bad sector) for the bad ranges, '+' (finished) for
// the rest of [Start, End), '?' (non-tried) outside it. The ranges must be
// sorted and non-overlapping (BadRanges.Ranges) and lie in [Start, End).
// ddrescue, ddrescuelog and ddrescueview read it; for example
// `ddrescuelog -l- -b 512 map` lists the bad sectors.
func WriteMapfile(w io.Writer, bad []blockdev.BlockRange, o MapfileOptions) error {
	if o.BlockSize <= 0 || o.Blocks < 0 {
		return fmt.Errorf("scrub: mapfile: block size %d and device size %d blocks", o.BlockSize, o.Blocks)
	}
	end := o.End
	if end == 0 {
		end = o.Blocks
	}
	if o.Start < 0 || o.Start > end || end > o.Blocks {
		return fmt.Errorf("scrub: mapfile: checked range [%d, %d) of %d blocks: %w", o.Start, end, o.Blocks, device.ErrOutOfRange)
	}
	if err := checkRanges(bad); err != nil {
		return err
	}
	if k := len(bad); k > 0 && (bad[0].LBA < o.Start || bad[k-1].End() > end) {
		return fmt.Errorf("scrub: mapfile: bad blocks outside the checked range [%d, %d): %w", o.Start, end, device.ErrOutOfRange)
	}
	bs := int64(o.BlockSize)
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "# Mapfile. Created by difctl\n")
	for _, c := range o.Comments {
		fmt.Fprintf(bw, "# %s\n", c)
	}
	fmt.Fprintf(bw, "# current_pos  current_status  current_pass\n")
	fmt.Fprintf(bw, "0x%08X     %c               %d\n", 0, '+', 1)
	fmt.Fprintf(bw, "#      pos        size  status\n")
	line := func(from, to int64, status byte) {
		if to > from {
			fmt.Fprintf(bw, "0x%08X  0x%08X  %c\n", from*bs, (to-from)*bs, status)
		}
	}
	line(0, o.Start, '?')
	pos := o.Start
	for _, r := range bad {
		line(pos, r.LBA, '+')
		line(r.LBA, r.End(), '-')
		pos = r.End()
	}
	line(pos, end, '+')
	line(end, o.Blocks, '?')
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("scrub: mapfile: %w", err)
	}
	return nil
}

// checkRanges checks that ranges are sorted, non-empty, non-negative and
// non-overlapping.
func checkRanges(bad []blockdev.BlockRange) error {
	prev := int64(0)
	for _, r := range bad {
		if r.LBA < 0 || r.N <= 0 || r.LBA < prev || r.End() < r.LBA {
			return errors.New("scrub: bad block ranges must be sorted, non-empty and non-overlapping (use BadRanges)")
		}
		prev = r.End()
	}
	return nil
}
