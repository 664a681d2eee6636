package blockdev

// A BlockRange is the blocks [LBA, LBA+N).
type BlockRange struct {
	LBA, N int64
}

// End returns LBA+N.
func (r BlockRange) End() int64 { return r.LBA + r.N }
