// Package layout checks the block layouts of the kernels' batch calls.
package layout

// Valid reports whether a buffer of plen bytes holds n blocks of blockLen
// bytes, the i-th at offset i*stride: blockLen >= 0, stride >= blockLen when
// there is more than one block, and (n-1)*stride + blockLen <= plen,
// computed without overflow. Zero blocks always fit.
func Valid(n, plen, blockLen, stride int) bool {
	switch {
	case n == 0:
		return true
	case n < 0 || blockLen < 0 || blockLen > plen:
		return false
	case n == 1:
		return true
	case stride < blockLen:
		return false
	case stride == 0:
		return true // n empty blocks at offset 0
	}
	return n-1 <= (plen-blockLen)/stride
}
