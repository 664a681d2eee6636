//go:build unix

package kerneltest

import (
	"time"

	"golang.org/x/sys/unix"
)

// ThreadCPU returns the CPU time of the calling thread, or 0 where the
// clock is missing; the caller must have locked its goroutine to the
// thread (runtime.LockOSThread).
func ThreadCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
