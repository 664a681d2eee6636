package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version, if set at link time (go build -ldflags "-X
// main.version=v1.2.3"), is difctl's version. Packagers and CI that build
// with -buildvcs=false set it, since the binary then carries no revision.
var version string

// versionRecord describes the build: the --json line of difctl version and
// difctl --version.
type versionRecord struct {
	header
	Version string `json:"version"`
	// Source says where Version comes from: "ldflags" (-X main.version),
	// "module" (go install ...@version), "vcs" (a build in a checkout) or
	// "none".
	Source   string `json:"source"`
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
	GOOS     string `json:"goos"`
	GOARCH   string `json:"goarch"`
}

func (*versionRecord) recordType() string { return "version" }

// noVersion is the version of a build that carries none: not stamped,
// not installed at a version, built outside a checkout or with
// -buildvcs=false.
const noVersion = "devel (no version information: built with -buildvcs=false)"

// buildVersion describes the build from the link-time version, the
// module version and the VCS information the Go toolchain stamps, in that
// order of preference; bi is debug.ReadBuildInfo's (nil if none).
func buildVersion(stamped string, bi *debug.BuildInfo) *versionRecord {
	r := &versionRecord{Go: runtime.Version(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH}
	if bi != nil {
		r.Go = bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				r.Revision = s.Value
			case "vcs.time":
				r.Time = s.Value
			case "vcs.modified":
				r.Modified = s.Value == "true"
			}
		}
	}
	switch {
	case stamped != "":
		r.Version, r.Source = stamped, "ldflags"
	case bi != nil && bi.Main.Version != "" && bi.Main.Version != "(devel)":
		r.Version, r.Source = bi.Main.Version, "module"
	case r.Revision != "":
		r.Version, r.Source = "devel", "vcs"
	default:
		r.Version, r.Source = noVersion, "none"
	}
	return r
}

// String is the text of --version: version, revision (12 digits, +dirty)
// and its time when known, Go version, platform.
func (r *versionRecord) String() string {
	v := r.Version
	if r.Revision != "" {
		rev := r.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		v += " " + rev
		if r.Modified {
			v += "+dirty"
		}
		if r.Time != "" {
			v += " " + r.Time
		}
	}
	return fmt.Sprintf("%s %s %s/%s", v, r.Go, r.GOOS, r.GOARCH)
}

// currentVersion is this binary's buildVersion.
func currentVersion() *versionRecord {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return buildVersion(version, bi)
}

func newVersionCmd(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Show difctl's version and build (as --version)",
		Long: `Show difctl's version: the one stamped at link time (-ldflags
"-X main.version=..."), else the module version of go install ...@version,
else the revision of the checkout it was built in, and the Go version and
platform. A build with none of them (-buildvcs=false, not stamped) says so.
With --json, a "version" record (SCHEMA.md).

` + exitCodesHelp(exitOK, exitUsage),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runVersion(cmd.Context(), *g, cmd.OutOrStdout())
		},
	}
}

func runVersion(_ context.Context, g globalOptions, stdout io.Writer) error {
	r := currentVersion()
	out := newOutput(stdout, g.JSON)
	if out.json {
		return out.emit(r)
	}
	_, err := fmt.Fprintf(stdout, "difctl %s\n", r)
	return err
}
