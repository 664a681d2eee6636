package blockdev

import "context"

// checkReport is what checkAll saw: the run statistics and the failed
// checks by Kind, not counting transient ones.
type checkReport struct {
	RunStats
	Failures map[Kind]int64
}

// checkAll checks every block of src in runs of 256 with opt, as a scrub
// does; the scrub engine itself (blockdev/scrub) imports this package, so
// its tests live there and the Volume's tests check through CheckRun.
func checkAll(ctx context.Context, src CheckSource, opt CheckOptions) (*checkReport, error) {
	const run = 256
	rep := &checkReport{Failures: map[Kind]int64{}}
	scratch := make([]byte, src.ScratchSize(run))
	for lba := int64(0); lba < src.Blocks(); lba += run {
		n := int(min(run, src.Blocks()-lba))
		st, err := src.CheckRun(ctx, lba, n, scratch, opt, func(p Problem) {
			if !p.Transient {
				rep.Failures[p.Kind]++
			}
		})
		rep.Add(st)
		if err != nil {
			return rep, err
		}
	}
	return rep, nil
}
