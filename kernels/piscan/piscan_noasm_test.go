//go:build !amd64 || purego

package piscan

import "github.com/difctl/difctl/kernels/internal/kerneltest"

func wants() []kerneltest.Want {
	return []kerneltest.Want{{Name: "generic", Can: true}}
}
