package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"

	"github.com/difctl/difctl/store"
)

// TestWitnessLine holds the witness line to its format (version 1, as
// FileWitness has written it from the start), with the CRC-32C computed by
// the standard library as the oracle, and refuses damaged lines.
func TestWitnessLine(t *testing.T) {
	rec := store.WitnessRecord{VolumeUID: strings.Repeat("0f", 16), Gen: 1<<40 + 3, MAC: bytes.Repeat([]byte{0xa5}, 32)}
	body := "difctl-witness v1 uid=" + rec.VolumeUID + " gen=1099511627779 mac=" + strings.Repeat("a5", 32)
	want := fmt.Sprintf("%s crc=%08x\n", body, crc32.Checksum([]byte(body), crc32.MakeTable(crc32.Castagnoli)))
	line := store.MarshalWitness(rec)
	if string(line) != want {
		t.Fatalf("MarshalWitness = %q, want %q", line, want)
	}
	for _, in := range [][]byte{line, bytes.TrimSuffix(line, []byte("\n"))} {
		got, err := store.ParseWitness(in)
		if err != nil || got.VolumeUID != rec.VolumeUID || got.Gen != rec.Gen || !bytes.Equal(got.MAC, rec.MAC) {
			t.Fatalf("ParseWitness(%q) = %+v, %v", in, got, err)
		}
	}
	withCRC := func(b string) string {
		return fmt.Sprintf("%s crc=%08x", b, crc32.Checksum([]byte(b), crc32.MakeTable(crc32.Castagnoli)))
	}
	for name, bad := range map[string]string{
		"empty":     "",
		"bit-flip":  strings.Replace(want, "gen=1", "gen=3", 1),
		"no-crc":    body,
		"version":   withCRC(strings.Replace(body, "v1", "v2", 1)),
		"short-mac": withCRC(strings.Replace(body, "mac="+strings.Repeat("a5", 32), "mac=a5", 1)),
		"no-uid":    withCRC(strings.Replace(body, "uid=", "vol=", 1)),
	} {
		if _, err := store.ParseWitness([]byte(bad)); !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("line=%s: ParseWitness = %v, want ErrCorrupt", name, err)
		}
	}
}
