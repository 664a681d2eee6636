package device

import (
	"fmt"
	"io"
	"sync"
)

// memChunk is the allocation unit of a Mem, a multiple of every
// valid block size.
const memChunk = 64 << 10

// Mem is a sparse in-memory [Device]: memory is allocated in 64 KiB
// chunks as they are first written, and unwritten space reads as zeros.
type Mem struct {
	size   int64
	bs     int
	mu     sync.RWMutex
	chunks map[int64][]byte // chunk index -> memChunk bytes (the last may be shorter)
	closed bool
}

var (
	_ Device     = (*Mem)(nil)
	_ Discarder  = (*Mem)(nil)
	_ DataFinder = (*Mem)(nil)
)

// NewMem returns an empty (all-zero) memory device of size bytes with
// the given logical block size, a power of two from 512 to 65536; size must
// be a non-negative multiple of it.
func NewMem(size int64, blockSize int) (*Mem, error) {
	if !validBlockSize(blockSize) {
		return nil, fmt.Errorf("blockdev: block size %d is not a power of two from 512 to 65536", blockSize)
	}
	if size < 0 || size%int64(blockSize) != 0 {
		return nil, fmt.Errorf("blockdev: memory device size %d is not a non-negative multiple of the %d-byte block size", size, blockSize)
	}
	return &Mem{size: size, bs: blockSize, chunks: make(map[int64][]byte)}, nil
}

// Size implements [Device].
func (m *Mem) Size() int64 { return m.size }

// LogicalBlockSize implements [Device].
func (m *Mem) LogicalBlockSize() int { return m.bs }

// PhysicalBlockSize implements [Device]; it equals the logical block size.
func (m *Mem) PhysicalBlockSize() int { return m.bs }

// Allocated returns the number of bytes of memory holding data.
func (m *Mem) Allocated() int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var n int64
	for _, c := range m.chunks {
		n += int64(len(c))
	}
	return n
}

// ReadAt implements [Device].
func (m *Mem) ReadAt(p []byte, off int64) (int, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return 0, ErrClosed
	}
	if err := CheckRange("read", off, int64(len(p)), m.size); err != nil {
		return 0, err
	}
	for done := 0; done < len(p); {
		pos := off + int64(done)
		ci, co := pos/memChunk, int(pos%memChunk)
		n := min(len(p)-done, memChunk-co)
		if c := m.chunks[ci]; c != nil {
			copy(p[done:done+n], c[co:])
		} else {
			clear(p[done : done+n])
		}
		done += n
	}
	return len(p), nil
}

// WriteAt implements [Device].
func (m *Mem) WriteAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, ErrClosed
	}
	if err := CheckRange("write", off, int64(len(p)), m.size); err != nil {
		return 0, err
	}
	for done := 0; done < len(p); {
		pos := off + int64(done)
		ci, co := pos/memChunk, int(pos%memChunk)
		n := min(len(p)-done, memChunk-co)
		c := m.chunks[ci]
		if c == nil {
			c = make([]byte, min(memChunk, m.size-ci*memChunk))
			m.chunks[ci] = c
		}
		copy(c[co:co+n], p[done:])
		done += n
	}
	return len(p), nil
}

// Discard implements [Discarder]: the range reads as zeros afterwards, and
// whole chunks inside it are freed.
func (m *Mem) Discard(off, n int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	if err := CheckRange("discard", off, n, m.size); err != nil {
		return err
	}
	if err := CheckAligned("discard", off, n, m.bs); err != nil {
		return err
	}
	for pos, end := off, off+n; pos < end; {
		ci, co := pos/memChunk, pos%memChunk
		step := min(end-pos, memChunk-co)
		if c := m.chunks[ci]; c != nil {
			if co == 0 && step == int64(len(c)) {
				delete(m.chunks, ci)
			} else {
				clear(c[co : co+step])
			}
		}
		pos += step
	}
	return nil
}

// NextData implements [DataFinder] at chunk granularity.
func (m *Mem) NextData(off int64) (Extent, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return Extent{}, ErrClosed
	}
	if err := CheckRange("seek data", off, 0, m.size); err != nil {
		return Extent{}, err
	}
	nchunks := (m.size + memChunk - 1) / memChunk
	first := int64(-1)
	if c := off / memChunk; int64(len(m.chunks)) < nchunks-c {
		for ci := range m.chunks {
			if ci >= c && (first < 0 || ci < first) {
				first = ci
			}
		}
	} else {
		for ci := c; ci < nchunks; ci++ {
			if m.chunks[ci] != nil {
				first = ci
				break
			}
		}
	}
	if first < 0 {
		return Extent{}, io.EOF
	}
	last := first
	for last+1 < nchunks && m.chunks[last+1] != nil {
		last++
	}
	start := max(first*memChunk, off)
	end := min((last+1)*memChunk, m.size)
	return Extent{Off: start, Len: end - start}, nil
}

// Sync implements [Device]; memory needs no syncing.
func (m *Mem) Sync() error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return ErrClosed
	}
	return nil
}

// Close implements [Device] and frees the memory.
func (m *Mem) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	m.closed = true
	m.chunks = nil
	return nil
}
