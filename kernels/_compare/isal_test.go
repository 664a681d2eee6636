//go:build isal

package compare

import (
	"testing"

	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/kernels/crct10dif"
)

func init() {
	impls16 = append(impls16, impl[uint16]{name: "isal", repeat: isalT10DIF, blocks: isalT10DIFBlocks})
	impls32 = append(impls32, impl[uint32]{name: "isal", repeat: isalISCSI, blocks: isalISCSIBlocks})
	// ISA-L has no CRC-64/NVME; crc64_ecma_refl is the same algorithm with
	// another polynomial. It is benchmarked with the CRC-64/NVME kernels
	// and checked against hash/crc64's ECMA table.
	ecma := impl[uint64]{name: "isal-ecma", repeat: isalECMARefl, blocks: isalECMAReflBlocks, standIn: true}
	impls64 = append(impls64, ecma)
	implsECMA = append(implsECMA, ecma)
}

// TestISALConventions pins the calling conventions the wrappers assume:
// crc16_t10dif continues a CRC-16/T10-DIF, and crc32_iscsi takes and
// returns the CRC-32C register, so that CRC-32C = ^crc32_iscsi(p, ^0).
func TestISALConventions(t *testing.T) {
	check := []byte("123456789")
	if got := isalT10DIF(0, check, 1); got != 0xD0DB {
		t.Errorf("crc16_t10dif(0, 123456789) = %#x, want 0xd0db", got)
	}
	if got := isalISCSI(0, check, 1); got != 0xE3069283 {
		t.Errorf("^crc32_iscsi(123456789, ^0) = %#x, want 0xe3069283", got)
	}
	if got, want := isalISCSI(0, buf[:4096], 1), crc32c.Checksum(buf[:4096]); got != want {
		t.Errorf("crc32_iscsi over 4 KiB: %#x, crc32c %#x", got, want)
	}
	if got := isalECMARefl(0, check, 1); got != 0x995DC9BBDF1939FA {
		t.Errorf("crc64_ecma_refl(0, 123456789) = %#x, want 0x995dc9bbdf1939fa (CRC-64/XZ)", got)
	}
	if got, want := isalT10DIF(0, buf[:4096], 1), crct10dif.Checksum(buf[:4096]); got != want {
		t.Errorf("crc16_t10dif over 4 KiB: %#x, crct10dif %#x", got, want)
	}
}
