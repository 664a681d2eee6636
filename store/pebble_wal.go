package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/difctl/difctl/kernels/crc32c"
)

// Damage in the write-ahead log of a store that was not closed cleanly.
//
// Pebble's log is a sequence of 32 KiB blocks of checksummed chunks. Replay
// stops at the first chunk that fails its checksum; Pebble calls that
// corruption only if a chunk in a later block promises (by the "synced
// offset" its header carries) that the log was synced beyond the failure,
// and otherwise takes it for the tail a crash tore and drops it and
// everything after it, silently. Chunks later in the same block, and
// everything in the last block, are never looked at. checkLogTail reads
// the newest log before Pebble does, the same way but over all of the rest
// of the file: a later intact chunk whose synced offset is beyond the first
// bad chunk proves the bad chunk was durable, so the log is damaged, not
// torn. (Damage to the last records, which nothing later vouches for, still
// cannot be told from a torn write.)

const (
	walBlock       = 32 << 10
	walLegacyHdr   = 7
	walRecycleHdr  = walLegacyHdr + 4
	walSyncHdr     = walRecycleHdr + 8
	walSyncFirstID = 9 // chunk encodings 9-12: the wal-sync wire format
	walLastID      = 12
)

// walChecksum is Pebble's masked CRC-32C of a chunk's bytes from its
// encoding byte on.
func walChecksum(b []byte) uint32 {
	c := crc32c.Checksum(b)
	return (c>>15 | c<<17) + 0xa282ead8
}

// walHeaderSize returns the header size of a chunk encoding, 0 if invalid.
func walHeaderSize(enc byte) int {
	switch {
	case enc >= 1 && enc <= 4:
		return walLegacyHdr
	case enc >= 5 && enc <= 8:
		return walRecycleHdr
	case enc >= walSyncFirstID && enc <= walLastID:
		return walSyncHdr
	}
	return 0
}

// walChunk checks the chunk at off of b (the log) for log number num. It
// returns the chunk's total length, and ok when it is intact.
func walChunk(b []byte, off int, num uint32) (n int, ok bool) {
	blockEnd := (off/walBlock + 1) * walBlock
	if blockEnd > len(b) {
		blockEnd = len(b)
	}
	if off+walLegacyHdr > blockEnd {
		return 0, false
	}
	h := walHeaderSize(b[off+6])
	if h == 0 || off+h > blockEnd {
		return 0, false
	}
	length := int(binary.LittleEndian.Uint16(b[off+4:]))
	if off+h+length > blockEnd {
		return 0, false
	}
	if h > walLegacyHdr && binary.LittleEndian.Uint32(b[off+7:]) != num {
		return 0, false
	}
	if binary.LittleEndian.Uint32(b[off:]) != walChecksum(b[off+6:off+h+length]) {
		return 0, false
	}
	return h + length, true
}

// newestLog returns the name and number of the highest-numbered log of dir.
func newestLog(names []string) (string, uint64, bool) {
	var best string
	var num uint64
	found := false
	for _, n := range names {
		s, ok := strings.CutSuffix(n, ".log")
		if !ok || !allDigits(s) {
			continue
		}
		v, err := strconv.ParseUint(s, 10, 64)
		if err == nil && (!found || v > num) {
			best, num, found = n, v, true
		}
	}
	return best, num, found
}

// checkLogTail reports a *CorruptFileError if the newest log of dir stops
// at a damaged chunk that a later intact chunk proves was synced.
func checkLogTail(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil // Pebble reports it
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	name, num, ok := newestLog(names)
	if !ok || num > 1<<32-1 {
		return nil
	}
	path := filepath.Join(dir, name)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("store: open pebble:%s: read %s: %v", dir, name, err)
	}
	bad, found := walFirstBad(b, uint32(num))
	if !found {
		return nil
	}
	for off := bad + 1; off+walSyncHdr <= len(b); off++ {
		enc := b[off+6]
		if enc < walSyncFirstID || enc > walLastID || binary.LittleEndian.Uint32(b[off+7:]) != uint32(num) {
			continue
		}
		if _, ok := walChunk(b, off, uint32(num)); !ok {
			continue
		}
		if synced := binary.LittleEndian.Uint64(b[off+11:]); synced > uint64(bad) {
			return &CorruptFileError{Path: path, Reason: fmt.Sprintf(
				"the log's record at offset %d fails its checksum, and an intact record at offset %d says the log was synced to offset %d: the record was durable and is damaged, not torn by a crash (Pebble would drop it and every later commit)",
				bad, off, synced)}
		}
	}
	return nil
}

// walFirstBad walks the chunks of the log b and returns the offset of the
// first one that is damaged (found), or found false when the log ends
// cleanly: at its end, or at a zeroed or foreign (recycled) chunk header.
func walFirstBad(b []byte, num uint32) (int, bool) {
	off := 0
	for off < len(b) {
		if rest := walBlock - off%walBlock; rest < walLegacyHdr {
			off += rest // a block's unusable tail
			continue
		}
		n, ok := walChunk(b, off, num)
		if ok {
			off += n
			continue
		}
		if off+walLegacyHdr > len(b) {
			return 0, false // a header cut off at the end: torn
		}
		h := b[off : off+walLegacyHdr]
		if binary.LittleEndian.Uint32(h) == 0 && h[4] == 0 && h[5] == 0 && h[6] == 0 {
			return 0, false // zeroed: preallocated space after the end
		}
		if enc := h[6]; walHeaderSize(enc) > walLegacyHdr && off+walRecycleHdr <= len(b) && binary.LittleEndian.Uint32(b[off+7:]) != num {
			return 0, false // a chunk of the log this file was recycled from
		}
		return off, true
	}
	return 0, false
}
