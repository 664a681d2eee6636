// Package asm holds every generator of the kernel packages: the avo
// generators of the amd64 assembly (fold, fused, crc32hybrid, poly1305)
// and crcgen, which writes each CRC package's shared Go layer and constants.
// It is its own module so that avo never becomes a dependency of the
// library. Each generator is run by go generate in the package it writes,
// as `go run -C ../_asm ./NAME FLAGS`, through the scaffolding of
// internal/scaffold; internal/emu runs the generated amd64 kernels in an
// emulator for the CPUs this machine lacks.
package asm
