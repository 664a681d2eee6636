//go:build !purego

package crc32c

func registerArch() {}
