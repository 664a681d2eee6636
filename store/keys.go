package store

import (
	"encoding/binary"
	"fmt"
)

// Key layout. Every record of a volume lives under its prefix
//
//	"T" | len(volume) (1 byte) | volume | record type (1 byte) | suffix
//
// so volumes never interleave and one volume's records can be scanned or
// deleted as a range. Record types and suffixes:
//
//	'C' cursor     | scrub name
//	'D' parity intent | stripe (8, big-endian) (parity.go)
//	'F' finding    | first LBA (8, big-endian) | field
//	'G' generation (keyed volumes: keyed.go)
//	'I' intent     | first LBA (8, big-endian) | sequence (8, big-endian)
//	'J' tag intent | first LBA (8) | sequence (8) (keyed.go)
//	'K' tag page   | page number (8, big-endian) (keyed.go)
//	'M' manifest
//	'P' page       | page number (8, big-endian)
//	'Q' parity checksums | page number (8, big-endian) (parity.go)
//	'R' empty run  | last page of the run (8, big-endian) (runs.go)
//	'S' seal (keyed volumes: seal.go)
//	'X' metadata   | name ("journal", "mirrors", "parity")
//
// Big-endian numbers make byte order equal numeric order, so scans are
// ordered by LBA. A volume's pages are each a 'P' record (and, keyed, a 'K'
// record) or a page of one 'R' run, never both (runs.go); a run is keyed by
// its last page so that the run holding a page is the first at or after
// it.
const (
	keyNamespace = 'T'

	recCursor   = 'C'
	recFinding  = 'F'
	recIntent   = 'I'
	recManifest = 'M'
	recPage     = 'P'
	recMeta     = 'X'

	maxVolumeName = 255
)

func volumePrefix(volume string) ([]byte, error) {
	if len(volume) == 0 || len(volume) > maxVolumeName {
		return nil, fmt.Errorf("%w: volume name must be 1..%d bytes, got %d", ErrInvalid, maxVolumeName, len(volume))
	}
	p := make([]byte, 0, 2+len(volume))
	p = append(p, keyNamespace, byte(len(volume)))
	return append(p, volume...), nil
}

// recKey returns prefix|typ|suffix in a new slice.
func recKey(prefix []byte, typ byte, suffix ...byte) []byte {
	k := make([]byte, 0, len(prefix)+1+len(suffix))
	k = append(k, prefix...)
	k = append(k, typ)
	return append(k, suffix...)
}

// u64Key returns prefix|typ|v with v (an LBA, a page number or a block count,
// never negative) as a big-endian uint64: the one place where the store's
// int64 block numbers meet their on-disk encoding. keyInt is its inverse.
func u64Key(prefix []byte, typ byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(recKey(prefix, typ), uint64(v))
}

// keyInt decodes the big-endian block number u64Key wrote. A stored value
// beyond math.MaxInt64 (only a damaged key) decodes as negative, and every
// caller's range check refuses it.
func keyInt(b []byte) int64 { return int64(binary.BigEndian.Uint64(b)) }

// prefixEnd returns the smallest key greater than every key starting with p
// (nil if there is none).
func prefixEnd(p []byte) []byte {
	end := append([]byte{}, p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}
