package dif

// The oracle: the simplest correct code, written from the tables of
// docs/formats.md, "Formats", sharing nothing with the fast path. Bitwise CRCs,
// math/big for the tag space, one byte at a time.

import (
	"math/big"
	"math/bits"
)

// bitwiseCRC16 is CRC-16/T10-DIF: poly 0x8BB7, init 0, not reflected,
// xorout 0.
func bitwiseCRC16(p []byte) uint64 {
	var crc uint16
	for _, b := range p {
		crc ^= uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x8BB7
			} else {
				crc <<= 1
			}
		}
	}
	return uint64(crc)
}

// bitwiseReflected is a reflected CRC with init and xorout all ones, of
// width 32 or 64, from the normal polynomial.
func bitwiseReflected(width int, poly uint64, p []byte) uint64 {
	rpoly := bits.Reverse64(poly) >> (64 - width)
	all := ^uint64(0) >> (64 - width)
	crc := all
	for _, b := range p {
		crc ^= uint64(b)
		for range 8 {
			if crc&1 != 0 {
				crc = crc>>1 ^ rpoly
			} else {
				crc >>= 1
			}
		}
	}
	return crc ^ all
}

func bitwiseCRC32C(p []byte) uint64    { return bitwiseReflected(32, 0x1EDC6F41, p) }
func bitwiseCRC64NVME(p []byte) uint64 { return bitwiseReflected(64, 0xAD93D23594C93659, p) }

// oracleSpec is the format as the tables describe it.
type oracleSpec struct {
	guardBytes int                 // 2, 4, 8
	crc        func([]byte) uint64 // the guard CRC
	spaceBits  int                 // 32, 80, 48
	tupleSize  int                 // 8, 16
}

func specOf(g Guard) oracleSpec {
	switch g {
	case Guard16:
		return oracleSpec{2, bitwiseCRC16, 32, 8}
	case Guard32:
		return oracleSpec{4, bitwiseCRC32C, 80, 16}
	default:
		return oracleSpec{8, bitwiseCRC64NVME, 48, 16}
	}
}

func pow2(n int) *big.Int { return new(big.Int).Lsh(big.NewInt(1), uint(n)) }

func bigU(v uint64) *big.Int { return new(big.Int).SetUint64(v) }

// bigBytes returns v as n big-endian bytes (v < 2^(8n)).
func bigBytes(v *big.Int, n int) []byte { return v.FillBytes(make([]byte, n)) }

// oracleBlock locates block i of a run: its data and its metadata.
func oracleBlock(f Format, data, md []byte, i int) (d, m []byte) {
	bs, ms := f.BlockSize(), f.MetadataSize()
	if f.Layout() == Interleaved {
		ext := bs + ms
		return data[i*ext : i*ext+bs], data[i*ext+bs : (i+1)*ext]
	}
	return data[i*bs : (i+1)*bs], md[i*ms : (i+1)*ms]
}

// oracleTupleAt returns the tuple bytes inside metadata m.
func oracleTupleAt(f Format, m []byte) []byte {
	ts := specOf(f.Guard()).tupleSize
	if f.Position() == PIFirst {
		return m[:ts]
	}
	return m[len(m)-ts:]
}

// oracleGuard computes the guard of a block from its data and metadata.
func oracleGuard(f Format, d, m []byte) uint64 {
	sp := specOf(f.Guard())
	covered := append([]byte(nil), d...)
	if f.Position() == PILast {
		covered = append(covered, m[:len(m)-sp.tupleSize]...)
	}
	return sp.crc(covered)
}

// oracleRef returns the ref tag of block i: (RefTag + i) mod 2^R for Types
// 1 and 2, RefTag for Type 3.
func oracleRef(f Format, p Params, i int) *big.Int {
	r := f.RefTagBits()
	ref := bigU(p.RefTag)
	if f.Type() != Type3 {
		ref.Add(ref, big.NewInt(int64(i)))
	}
	return ref.Mod(ref, pow2(r))
}

// oracleGenerate writes the PI of every block, one byte at a time.
func oracleGenerate(f Format, data, md []byte, p Params, n int) {
	if f.Type() == Type0 {
		return
	}
	sp := specOf(f.Guard())
	r := f.RefTagBits()
	for i := 0; i < n; i++ {
		d, m := oracleBlock(f, data, md, i)
		g := oracleGuard(f, d, m)
		space := new(big.Int).Lsh(bigU(p.StorageTag), uint(r))
		space.Or(space, oracleRef(f, p, i))
		var t []byte
		t = append(t, bigBytes(bigU(g), sp.guardBytes)...)
		t = append(t, byte(p.AppTag>>8), byte(p.AppTag))
		t = append(t, bigBytes(space, sp.spaceBits/8)...)
		copy(oracleTupleAt(f, m), t)
	}
}

func splitBig(v *big.Int) (hi uint16, lo uint64) {
	lo = new(big.Int).And(v, bigU(^uint64(0))).Uint64()
	hi = uint16(new(big.Int).Rsh(v, 64).Uint64())
	return hi, lo
}

// oracleVerify classifies every block and lists every failed check.
func oracleVerify(f Format, data, md []byte, p Params, n int) ([]State, []CheckError) {
	states := make([]State, n)
	var errs []CheckError
	if f.Type() == Type0 {
		return states, errs
	}
	sp := specOf(f.Guard())
	r := f.RefTagBits()
	for i := 0; i < n; i++ {
		d, m := oracleBlock(f, data, md, i)
		t := oracleTupleAt(f, m)
		guard := new(big.Int).SetBytes(t[:sp.guardBytes]).Uint64()
		app := uint16(t[sp.guardBytes])<<8 | uint16(t[sp.guardBytes+1])
		space := new(big.Int).SetBytes(t[sp.guardBytes+2:])
		allOnes := new(big.Int).Sub(pow2(sp.spaceBits), big.NewInt(1))
		if app == 0xFFFF && space.Cmp(allOnes) == 0 {
			states[i] = StateUnwritten
			continue
		}
		if app == 0xFFFF && (f.Type() == Type1 || f.Type() == Type2) {
			states[i] = StateEscaped
			continue
		}
		add := func(field Field, want, got *big.Int) {
			ce := CheckError{Block: i, LBA: p.LBA + int64(i), Field: field}
			ce.ExpectedHigh, ce.Expected = splitBig(want)
			ce.ActualHigh, ce.Actual = splitBig(got)
			errs = append(errs, ce)
			states[i] = StateFailed
		}
		if p.Skip&CheckGuard == 0 {
			if want := oracleGuard(f, d, m); want != guard {
				add(FieldGuard, bigU(want), bigU(guard))
			}
		}
		if p.Skip&CheckAppTag == 0 && app&p.AppMask != p.AppTag&p.AppMask {
			add(FieldAppTag, bigU(uint64(p.AppTag)), bigU(uint64(app)))
		}
		storedRef := new(big.Int).Mod(space, pow2(r))
		storedStor := new(big.Int).Rsh(space, uint(r))
		if p.Skip&CheckRefTag == 0 && f.Type() != Type3 && r > 0 {
			if want := oracleRef(f, p, i); want.Cmp(storedRef) != 0 {
				add(FieldRefTag, want, storedRef)
			}
		}
		if p.Skip&CheckStorageTag == 0 && f.StorageTagBits() > 0 {
			if want := bigU(p.StorageTag); want.Cmp(storedStor) != 0 {
				add(FieldStorageTag, want, storedStor)
			}
		}
	}
	return states, errs
}

// oracleSums is the sector sum of every block: the bitwise CRC-32C of its
// BlockSize data bytes.
func oracleSums(f Format, data, md []byte, n int) []uint32 {
	sums := make([]uint32, n)
	for i := range n {
		d, _ := oracleBlock(f, data, md, i)
		sums[i] = uint32(bitwiseCRC32C(d[:f.BlockSize()]))
	}
	return sums
}
