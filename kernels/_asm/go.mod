module github.com/difctl/difctl/kernels/_asm

go 1.26

require github.com/mmcloughlin/avo v0.5.0 // indirect
