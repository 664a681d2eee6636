// Package asm holds the avo generators of the amd64 kernels. It is its own
// module so that avo never becomes a dependency of the library; run it with
// `go generate` in the kernel packages.
package asm
