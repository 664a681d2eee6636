//go:build !unix

package kerneltest

import "time"

// ThreadCPU has no clock to read here: it returns 0, and benchmarks that
// use it report no CPU time.
func ThreadCPU() time.Duration { return 0 }
