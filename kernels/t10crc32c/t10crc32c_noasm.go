//go:build !amd64 || purego

package t10crc32c

func registerArch() {}
