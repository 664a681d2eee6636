module github.com/difctl/difctl/kernels/_asm

go 1.26.0

require github.com/mmcloughlin/avo v0.6.0

require (
	github.com/difctl/difctl v0.0.0
	golang.org/x/mod v0.41.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/tools v0.51.0 // indirect
)

replace github.com/difctl/difctl => ../..
