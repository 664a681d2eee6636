//go:build !purego

package crc64nvme

func registerArch() {}
