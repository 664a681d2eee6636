// Package scrub owns the scrub engine: [Run] streams over a
// [blockdev.CheckSource] (a Volume, an extended-LBA image, a DIX pair) with
// parallel workers and bounded memory, and reports every failing block as a
// [Finding], in LBA order.
//
// A scrub honours a [RateLimiter] that can change, pause and resume while it
// runs. It persists its [Cursor] and findings through a [State] (in the
// volume's store, [NewStoreState], or in a file beside a self-contained
// image, [OpenFileState]), so that a killed scrub resumes where it stopped;
// in errors-only mode it rechecks only the open findings. [BadRanges]
// collects the bad blocks, and [WriteBadblocks] and [WriteMapfile] turn them
// into a badblocks list or a GNU ddrescue mapfile.
//
// The package builds only on blockdev's CheckSource interface: no scrub file
// names the Volume. Errors are prefixed "scrub: ".
package scrub
