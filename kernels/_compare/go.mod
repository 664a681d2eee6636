module github.com/difctl/difctl/kernels/_compare

go 1.26.0

replace github.com/difctl/difctl => ../..

require (
	github.com/difctl/difctl v0.0.0
	github.com/minio/crc64nvme v1.1.1
	golang.org/x/sys v0.50.0
)

require github.com/klauspost/cpuid/v2 v2.3.0 // indirect
