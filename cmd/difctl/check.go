package main

import (
	"context"

	"github.com/difctl/difctl/blockdev"
)

// Checking a range of blocks in bounded runs: verify and remap, over a
// protected volume or an image with its own PI.

// checkRunBytes is the scratch per CheckRun call: runs of about 1 MiB keep
// memory bounded whatever the image size, and calls few.
const checkRunBytes = 1 << 20

// checkRange verifies blocks [start, start+count) of src in runs, passing
// each problem to report and the bytes of each run to prog, and returns
// the totals. When ctx is cancelled it returns what it counted with the
// cancellation cause.
func checkRange(ctx context.Context, src blockdev.CheckSource, start, count int64, opt blockdev.CheckOptions,
	prog progress, bytesPerBlock int64, report func(blockdev.Problem)) (blockdev.RunStats, error) {
	per := max(1, checkRunBytes/max(1, src.ScratchSize(1)))
	scratch := make([]byte, src.ScratchSize(per))
	var total blockdev.RunStats
	for lba, end := start, start+count; lba < end; {
		if ctx.Err() != nil {
			return total, context.Cause(ctx)
		}
		n := int(min(int64(per), end-lba))
		st, err := src.CheckRun(ctx, lba, n, scratch, opt, report)
		if err != nil {
			if ctx.Err() != nil {
				return total, context.Cause(ctx)
			}
			return total, err
		}
		total.Add(st)
		prog.Add(int64(n) * bytesPerBlock)
		lba += int64(n)
	}
	return total, nil
}
