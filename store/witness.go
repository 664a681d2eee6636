package store

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/difctl/difctl/kernels/crc32c"
)

// The witness record of a keyed volume: a copy of its seal's generation
// and MAC kept outside the store (blockdev.Witness), so that a rollback of
// the whole store is found. Every witness (a file, a key in etcd) holds it
// in one text line, version 1:
//
//	difctl-witness v1 uid=<32 hex> gen=<decimal> mac=<64 hex> crc=<8 hex>
//
// where crc is the CRC-32C (hex) of the line up to " crc=".

const witnessHeader = "difctl-witness v1"

// ErrWitnessAhead is matched by every *WitnessAheadError.
var ErrWitnessAhead = errors.New("store: witness is ahead")

// WitnessRecord is what a witness keeps: the volume and its seal.
type WitnessRecord struct {
	VolumeUID string // 32 hex digits (Manifest.VolumeUID)
	Gen       uint64
	MAC       []byte // 32 bytes
}

// MarshalWitness returns the line of rec, with its newline.
func MarshalWitness(rec WitnessRecord) []byte {
	body := fmt.Sprintf("%s uid=%s gen=%d mac=%x", witnessHeader, rec.VolumeUID, rec.Gen, rec.MAC)
	return fmt.Appendf(nil, "%s crc=%08x\n", body, crc32c.Checksum([]byte(body)))
}

// ParseWitness decodes a line written by MarshalWitness (the newline is
// optional). A line that does not decode is a *CorruptError (record
// "witness").
func ParseWitness(b []byte) (WitnessRecord, error) {
	bad := func(reason string) error { return &CorruptError{Record: "witness", Reason: reason} }
	line := strings.TrimSuffix(string(b), "\n")
	body, crcText, ok := strings.Cut(line, " crc=")
	if !ok {
		return WitnessRecord{}, bad("no crc")
	}
	if crc, err := strconv.ParseUint(crcText, 16, 32); err != nil || uint32(crc) != crc32c.Checksum([]byte(body)) {
		return WitnessRecord{}, bad("checksum does not match")
	}
	f := strings.Fields(body)
	if len(f) != 5 || f[0]+" "+f[1] != witnessHeader {
		return WitnessRecord{}, bad("not a version 1 witness")
	}
	var rec WitnessRecord
	for _, kv := range f[2:] {
		k, v, _ := strings.Cut(kv, "=")
		var err error
		switch k {
		case "uid":
			rec.VolumeUID = v
		case "gen":
			if rec.Gen, err = strconv.ParseUint(v, 10, 64); err != nil {
				return WitnessRecord{}, bad("bad generation")
			}
		case "mac":
			if rec.MAC, err = hex.DecodeString(v); err != nil || len(rec.MAC) != 32 {
				return WitnessRecord{}, bad("bad MAC")
			}
		}
	}
	if len(rec.VolumeUID) != 32 || rec.MAC == nil {
		return WitnessRecord{}, bad("incomplete")
	}
	return rec, nil
}

// WitnessAheadError reports a witness write refused because the witness
// already holds a newer seal of the volume: a higher generation, or the
// same generation with another MAC (a seal of another history). A witness
// that can compare and swap atomically (etcd) never moves backwards, even
// under writers racing. It matches ErrWitnessAhead.
type WitnessAheadError struct {
	Witness   string // where the record is, for messages
	VolumeUID string
	Gen       uint64 // the generation refused
	StoredGen uint64 // the generation the witness holds
}

func (e *WitnessAheadError) Error() string {
	if e.Gen == e.StoredGen {
		return fmt.Sprintf("store: witness %s: volume %s: refused the seal of generation %d: the witness holds another seal of that generation", e.Witness, e.VolumeUID, e.Gen)
	}
	return fmt.Sprintf("store: witness %s: volume %s: refused the seal of generation %d: the witness holds generation %d", e.Witness, e.VolumeUID, e.Gen, e.StoredGen)
}

// Is makes a *WitnessAheadError match ErrWitnessAhead.
func (e *WitnessAheadError) Is(target error) bool { return target == ErrWitnessAhead }
