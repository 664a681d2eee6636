//go:build !amd64 || purego

package keyedcopy

func registerArch() {}
