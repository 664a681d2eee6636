//go:build !purego

package crct10dif

func registerArch() {}
