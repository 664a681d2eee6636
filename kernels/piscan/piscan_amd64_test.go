//go:build !purego

package piscan

import (
	"github.com/difctl/difctl/kernels/internal/kerneltest"
	"golang.org/x/sys/cpu"
)

func wants() []kerneltest.Want {
	return []kerneltest.Want{
		{Name: "avx512", Can: cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW},
		{Name: "avx2", Can: cpu.X86.HasAVX2},
		{Name: "generic", Can: true},
	}
}
