//go:build !amd64 || purego

package poly1305

func registerArch() {}
