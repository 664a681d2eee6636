//go:build !purego

package poly1305

// IFMAKeyWords is the size of IFMAKey's table.
const IFMAKeyWords = key44Words

// IFMAKey returns k's powers of r in the radix-2^44 layout of the AVX-512
// IFMA lane kernels (ifmaKey in poly1305_lanes44.go: the words of r..r^4,
// of r^4, r^8, r^12 and r^16 for the stream kernels, their last step's
// per-lane factor and their pad bits' parts), for kernels of other
// packages that evaluate the same lanes (kernels/keyedcopy). It is key
// material: it must be kept as secret as k, and never modified.
func (k *Key) IFMAKey() *[IFMAKeyWords]uint64 { return (*[IFMAKeyWords]uint64)(&k.poly.ifma) }

// PartialFrom44 is the Partial of an IFMA lane accumulator x0 + x1·2^44 +
// x2·2^88 with x0 and x2 below 2^44 and 2^42 and x1 below 2^44 + 2^4 (the
// bounds of the lane kernels' last carry chain): the same value, cut into
// 26-bit limbs, unreduced, so congruent to the polynomial as the lanes
// were.
func PartialFrom44(x0, x1, x2 uint64) Partial { return partial44(x0, x1, x2) }
