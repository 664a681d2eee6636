//go:build !unix

package kerneltest

import "time"

// threadCPU has no clock to read here; BenchCopyPaths then reports no CPU
// time.
func threadCPU() time.Duration { return 0 }
