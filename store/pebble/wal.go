package pebble

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/store"
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

// walChunk checks the chunk at off of the block b (chunks never cross a
// block) for log number num. It returns the chunk's total length, and ok
// when it is intact.
func walChunk(b []byte, off int, num uint32) (n int, ok bool) {
	if off+walLegacyHdr > len(b) {
		return 0, false
	}
	h := walHeaderSize(b[off+6])
	if h == 0 || off+h > len(b) {
		return 0, false
	}
	length := int(binary.LittleEndian.Uint16(b[off+4:]))
	if off+h+length > len(b) {
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

// logFile is a write-ahead log found in a store's directory.
type logFile struct {
	name string
	size int64
}

// newestLogFile returns dir's newest write-ahead log, if it has one (for
// the message of commits lost with it, see logEvidence).
func newestLogFile(dir string) []logFile {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	name, _, ok := newestLog(names)
	if !ok {
		return nil
	}
	fi, err := os.Stat(filepath.Join(dir, name))
	if err != nil {
		return nil
	}
	return []logFile{{name, fi.Size()}}
}

// checkLogTail reports a *store.CorruptFileError if the newest log of dir
// stops at a damaged chunk that a later intact chunk proves was synced. It
// reads the log one 32 KiB block at a time.
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
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("store: open pebble:%s: read %s: %v", dir, name, err)
	}
	defer f.Close()
	buf := make([]byte, walBlock)
	bad := int64(-1) // the first damaged chunk, once found
	for block := int64(0); ; block++ {
		n, err := io.ReadFull(f, buf)
		if n == 0 {
			if err != nil && !errors.Is(err, io.EOF) {
				return fmt.Errorf("store: open pebble:%s: read %s: %v", dir, name, err)
			}
			return nil
		}
		b := buf[:n]
		base := block * walBlock
		from := 0
		if bad < 0 {
			off, found, end := walFirstBad(b, uint32(num))
			switch {
			case end:
				return nil // the log ends cleanly here
			case !found:
				continue
			}
			bad, from = base+int64(off), off+1
		}
		// Look for an intact wal-sync chunk that vouches for the bad one.
		for off := from; off+walSyncHdr <= len(b); off++ {
			enc := b[off+6]
			if enc < walSyncFirstID || enc > walLastID || binary.LittleEndian.Uint32(b[off+7:]) != uint32(num) {
				continue
			}
			if _, ok := walChunk(b, off, uint32(num)); !ok {
				continue
			}
			if synced := binary.LittleEndian.Uint64(b[off+11:]); synced > uint64(bad) {
				return &store.CorruptFileError{Path: path, Reason: fmt.Sprintf(
					"the log's record at offset %d fails its checksum, and an intact record at offset %d says the log was synced to offset %d: the record was durable and is damaged, not torn by a crash (Pebble would drop it and every later commit)",
					bad, base+int64(off), synced)}
			}
		}
		if err != nil {
			return nil // the last, short block
		}
	}
}

// walFirstBad walks the chunks of one block of the log and returns the
// offset of the first damaged one (found), or end when the log ends
// cleanly in this block: a zeroed chunk header (preallocated space), a
// chunk of the log the file was recycled from, or a header cut off at the
// end of the file. Neither means the block is whole.
func walFirstBad(b []byte, num uint32) (off int, found, end bool) {
	for off < len(b) {
		if len(b)-off < walLegacyHdr {
			if len(b) < walBlock {
				return 0, false, true // cut off at the end of the file
			}
			return 0, false, false // a block's unusable tail
		}
		if n, ok := walChunk(b, off, num); ok {
			off += n
			continue
		}
		h := b[off : off+walLegacyHdr]
		if binary.LittleEndian.Uint32(h) == 0 && h[4] == 0 && h[5] == 0 && h[6] == 0 {
			return 0, false, true
		}
		if walHeaderSize(h[6]) > walLegacyHdr && off+walRecycleHdr <= len(b) && binary.LittleEndian.Uint32(b[off+7:]) != num {
			return 0, false, true
		}
		return off, true, false
	}
	return 0, false, false
}
