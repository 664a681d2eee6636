//go:build !amd64 || purego

package piscan

func registerArch() {}
