// Package scrub owns the scrub engine: [Run] streams over a
// [blockdev.CheckSource] (a Volume, an extended-LBA image, a DIX pair) with
// parallel workers and bounded memory, and reports every failing block as a
// [Finding], in LBA order.
//
// A scrub honours a [RateLimiter] that can change, pause and resume while it
// runs. It persists its [Cursor] and findings through a [State] (in the
// volume's store, [NewStoreState], or in a file beside a self-contained
// image, [OpenFileState]; a self-contained image's state can also live in a
// store, [OpenImageState]), so that a killed scrub resumes where it stopped;
// in errors-only mode it rechecks only the open findings. [BadRanges]
// collects the bad blocks, and [WriteBadblocks] and [WriteMapfile] turn them
// into a badblocks list or a GNU ddrescue mapfile; [LoadEarlier] gives a
// resumed pass the bad blocks it found before it stopped, so that the lists
// and [Report.PassFailed] cover the whole pass.
//
// The package builds only on blockdev's CheckSource interface: no scrub file
// names the Volume. Errors are prefixed "scrub: ".
package scrub
