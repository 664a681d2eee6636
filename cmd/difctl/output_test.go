package main

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
)

// allRecords lists every JSON record type. A new record type goes here, and
// into SCHEMA.md: the tests below check both.
var allRecords = []record{
	&errorRecord{},
	&crcRecord{},
	&cpuRecord{},
	&kernelRecord{},
	&benchRecord{},
	&findingRecord{},
	&summaryRecord{},
	&convertRecord{},
	&remapRecord{},
	&injectRecord{},
	&imageRecord{},
	&tupleRecord{},
	&protectRecord{},
	&scrubRecord{},
	&discardRecord{},
	&writeRecord{},
	&manifestRecord{},
}

func TestRecordsStartWithHeader(t *testing.T) {
	for _, r := range allRecords {
		t.Run("type="+r.recordType(), func(t *testing.T) {
			var b bytes.Buffer
			if err := newOutput(&b, true).emit(r); err != nil {
				t.Fatal(err)
			}
			prefix := `{"schema":"difctl/v1","type":"` + r.recordType() + `"`
			if !strings.HasPrefix(b.String(), prefix) {
				t.Errorf("record %s does not start with %s", b.String(), prefix)
			}
			if strings.Count(b.String(), "\n") != 1 || !strings.HasSuffix(b.String(), "}\n") {
				t.Errorf("record %q is not one line", b.String())
			}
		})
	}
}

func TestSchemaDocumentsRecords(t *testing.T) {
	doc, err := os.ReadFile("SCHEMA.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "`"+schemaVersion+"`") {
		t.Errorf("SCHEMA.md does not name the version %s", schemaVersion)
	}
	for _, r := range allRecords {
		if !strings.Contains(string(doc), "### `"+r.recordType()+"`") {
			t.Errorf("SCHEMA.md has no section for record type %q", r.recordType())
		}
	}
}

func TestItemError(t *testing.T) {
	err := errors.New("read x:\nbad\tsector")
	for _, jsonLines := range []bool{false, true} {
		var stdout, stderr bytes.Buffer
		newOutput(&stdout, jsonLines).itemError(&stderr, "x", err)
		if got, want := stderr.String(), "difctl: read x: bad sector\n"; got != want {
			t.Errorf("json=%v: stderr %q, want %q", jsonLines, got, want)
		}
		want := ""
		if jsonLines {
			want = `{"schema":"difctl/v1","type":"error","file":"x","error":"read x: bad sector"}` + "\n"
		}
		if stdout.String() != want {
			t.Errorf("json=%v: stdout %q, want %q", jsonLines, stdout.String(), want)
		}
	}
}
