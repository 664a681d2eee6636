package main

import (
	"encoding/json"
	"runtime/debug"
	"strings"
	"testing"
)

// TestBuildVersion: the link-time version wins, then the module version
// of go install ...@version, then the checkout's revision; a build with
// none (-buildvcs=false, not stamped) says so.
func TestBuildVersion(t *testing.T) {
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}
	bi := func(v string, s []debug.BuildSetting) *debug.BuildInfo {
		return &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/difctl/difctl", Version: v}, Settings: s}
	}
	for _, tc := range []struct {
		name, stamped string
		bi            *debug.BuildInfo
		source, text  string
	}{
		{"source=ldflags", "v1.2.3", bi("(devel)", nil), "ldflags", "v1.2.3 go1.26.0 "},
		{"source=ldflags/vcs", "v1.2.3", bi("(devel)", vcs), "ldflags", "v1.2.3 0123456789ab+dirty 2026-12-01T10:00:00Z go1.26.0 "},
		{"source=module", "", bi("v1.4.0", nil), "module", "v1.4.0 go1.26.0 "},
		{"source=vcs", "", bi("(devel)", vcs), "vcs", "devel 0123456789ab+dirty 2026-12-01T10:00:00Z go1.26.0 "},
		{"source=none", "", bi("(devel)", nil), "none", "devel (no version information: built with -buildvcs=false) go1.26.0 "},
		{"source=none/nobuildinfo", "", nil, "none", "devel (no version information: built with -buildvcs=false) go"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := buildVersion(tc.stamped, tc.bi)
			if r.Source != tc.source || !strings.HasPrefix(r.String(), tc.text) {
				t.Errorf("source %q, text %q; want %q, %q...", r.Source, r.String(), tc.source, tc.text)
			}
		})
	}
}

// TestVersionJSON: difctl --version --json and difctl version --json write
// one version record; --version prints even with --quiet.
func TestVersionJSON(t *testing.T) {
	for _, args := range [][]string{{"--version", "--json"}, {"--json", "version"}, {"version", "--json"}} {
		out := mustDifctl(t, 0, args...)
		var r versionRecord
		if err := json.Unmarshal([]byte(out), &r); err != nil || r.Type != "version" || r.Schema != schemaVersion || r.Version == "" || r.Source == "" || r.Go == "" {
			t.Errorf("%v: %q (%v)", args, out, err)
		}
	}
	if out := mustDifctl(t, 0, "-q", "--version"); !strings.HasPrefix(out, "difctl ") {
		t.Errorf("-q --version: %q", out)
	}
}
