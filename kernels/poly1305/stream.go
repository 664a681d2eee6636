package poly1305

import "crypto/cipher"

// A MaskStream computes tags as its Key does, keeping the AES-CTR keystream
// of the masks from one call to the next: a call whose first nonce is the
// one after the previous call's last (the next blocks of a run, tagged in
// pieces) continues the keystream, where each call of the Key's methods
// starts one. Starting one (cipher.NewCTR) copies the AES key schedule
// into a new stream, about 500 bytes allocated; in a keyed read of 1 MiB in
// 512-byte blocks, tagged in pieces of up to 128 KiB, it was 4% of the
// keyed CPU time, as much as the keystream itself (a CPU profile). The
// tags are the Key's, bit for bit: the keystream of a nonce is the same
// whichever call produces it.
//
// A MaskStream is not safe for concurrent use; keep one per goroutine. A
// call that returns an error leaves it as it was.
type MaskStream struct {
	k    *Key
	ctr  cipher.Stream
	next Nonce // the nonce ctr's next mask is for, if ctr is set
	iv   [16]byte
}

// MaskStream returns a new MaskStream of k.
func (k *Key) MaskStream() *MaskStream { return &MaskStream{k: k} }

// from returns the keystream of the masks of n blocks from nonce on, and
// notes that the caller takes all 16*n bytes of it: s's keystream if it is
// at nonce, else a new one.
func (s *MaskStream) from(nonce *Nonce, n int) cipher.Stream {
	if s.ctr == nil || s.next != *nonce {
		s.iv = *nonce
		s.ctr = cipher.NewCTR(s.k.block, s.iv[:])
	}
	s.next = nonce.Add(uint64(n))
	return s.ctr
}

// BlocksAD is Key.BlocksAD with the masks from s.
func (s *MaskStream) BlocksAD(dst []Tag, nonce *Nonce, ad []byte, adLen int, p []byte, blockLen, stride int) error {
	return s.k.blocksAD(s, dst, nonce, ad, adLen, p, blockLen, stride)
}

// BlocksADCopy is Key.BlocksADCopy with the masks from s.
func (s *MaskStream) BlocksADCopy(dst []Tag, nonce *Nonce, ad []byte, adLen int, q, p []byte, blockLen, stride int) error {
	return s.k.blocksADCopy(s, dst, nonce, ad, adLen, q, p, blockLen, stride)
}

// TagsFromPartials is Key.TagsFromPartials with the masks from s.
func (s *MaskStream) TagsFromPartials(dst []Tag, nonce *Nonce, ad []byte, adLen int, parts []Partial, blockLen int) error {
	return s.k.tagsFromPartials(s, dst, nonce, ad, adLen, parts, blockLen)
}
