//go:build tools

// Package tools pins dependencies that the packages of this module use before
// their first importer lands. It is never built.
package tools

import (
	_ "github.com/cockroachdb/pebble/v2"
	_ "github.com/dustin/go-humanize"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/rogpeppe/go-internal/testscript"
	_ "github.com/schollz/progressbar/v3"
	_ "github.com/spf13/cobra"
	_ "golang.org/x/sys/cpu"
	_ "golang.org/x/sys/unix"
)
