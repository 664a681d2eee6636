package device

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sync"
	"unsafe"
)

var _ Mapper = (*File)(nil)

// fileMap is a File's read-only mapping, made on first use. Readers hold mu
// shared while they use it; Close takes it exclusively to unmap, so a
// mapping is never used after it is gone (an unmapped range may be reused
// for other memory).
type fileMap struct {
	mu     sync.RWMutex
	tried  bool
	closed bool
	m      []byte
	err    error // why there is no mapping

	// Pages read through a mapping count in the process's resident set
	// (they are the page cache's, which the kernel can still reclaim, but
	// a sweep over a whole device would show as gigabytes). The ranges
	// read are kept in a ring, and beyond mapBudget bytes the oldest are
	// released (MADV_DONTNEED: the page cache keeps them).
	rmu  sync.Mutex
	ring [mapRing]mapRange
	head int // oldest entry
	used int // entries
	held int64
}

type mapRange struct {
	off int64
	n   int
}

// mapBudget bounds the bytes of a mapping left resident by ReadMapped;
// mapRing bounds the ranges remembered.
const (
	mapBudget = 32 << 20 // with the heap, a scrub stays well under 64 MiB of RSS
	mapRing   = 512
)

// ReadMapped implements [Mapper]. The whole file is mapped at the first
// call, unless it was opened with direct I/O (whose point is to keep its
// data out of the page cache).
func (d *File) ReadMapped(off int64, n int, fn func([]byte) error) error {
	if d.closed.Load() {
		return ErrClosed
	}
	if err := CheckRange("read", off, int64(n), d.size); err != nil {
		return err
	}
	var refuse error
	if d.direct != nil {
		refuse = errors.ErrUnsupported
	}
	return d.mp.read(d.f, d.size, d.path, refuse, off, n, fn)
}

// read is ReadMapped over the first size bytes of f (named name), mapped
// at the first call unless refuse is set. The range was checked.
func (mp *fileMap) read(f *os.File, size int64, name string, refuse error, off int64, n int, fn func([]byte) error) error {
	mp.mu.RLock()
	if !mp.tried {
		mp.mu.RUnlock()
		mp.mu.Lock()
		if !mp.tried {
			mp.tried = true
			if mp.err = refuse; refuse == nil {
				mp.m, mp.err = mapFile(f, size)
			}
		}
		mp.mu.Unlock()
		mp.mu.RLock()
	}
	defer mp.mu.RUnlock()
	if mp.closed {
		return ErrClosed
	}
	if mp.m == nil {
		// Whatever the reason (direct I/O, a 32-bit address space, a
		// descriptor not open for reading), the caller falls back to
		// ReadAt: the error always matches errors.ErrUnsupported.
		err := mp.err
		switch {
		case err == nil:
			err = errors.ErrUnsupported
		case !errors.Is(err, errors.ErrUnsupported):
			err = fmt.Errorf("%w: %w", errors.ErrUnsupported, err)
		}
		return fmt.Errorf("blockdev: %s cannot be mapped: %w", name, err)
	}
	if n == 0 {
		return fn(nil)
	}
	err, fault := callMapped(mp.m, mp.m[off:off+int64(n)], fn)
	mp.note(off, n)
	if fault {
		return &IOError{Op: "read", Off: off, Len: int64(n), Err: ErrMapFault}
	}
	return err
}

// note records that [off, off+n) was read and releases the oldest ranges
// beyond the budget. Caller holds mu shared, with the mapping in place.
func (mp *fileMap) note(off int64, n int) {
	mp.rmu.Lock()
	defer mp.rmu.Unlock()
	if mp.held+int64(n) > mapBudget || mp.used == mapRing {
		// Release the older half in one go, contiguous ranges together:
		// each release costs a TLB flush on every core running us.
		var cur mapRange
		for mp.used > 0 && (mp.held+int64(n) > mapBudget/2 || mp.used > mapRing/2) {
			r := mp.ring[mp.head]
			mp.head = (mp.head + 1) % mapRing
			mp.used--
			mp.held -= int64(r.n)
			if cur.n > 0 && r.off == cur.off+int64(cur.n) {
				cur.n += r.n
				continue
			}
			if cur.n > 0 {
				mp.releaseLocked(cur.off, cur.n)
			}
			cur = r
		}
		if cur.n > 0 {
			mp.releaseLocked(cur.off, cur.n)
		}
	}
	mp.ring[(mp.head+mp.used)%mapRing] = mapRange{off, n}
	mp.used++
	mp.held += int64(n)
}

// releaseLocked drops the pages covering [off, off+n), best effort. The
// range is widened to whole 2 MiB of the address space: the page cache of
// a file system with large folios (ext4, XFS) is mapped by 2 MiB PMD
// entries where it can be, and dropping part of one splits it, with a TLB
// shootdown (an IPI to every CPU that ran the process) at each end of the
// range. Before, those splits took 4-5% of a verified sequential read's
// time (perf, Linux 6.18, ext4); the wider release only drops pages a
// little sooner, which the page cache still holds.
func (mp *fileMap) releaseLocked(off int64, n int) {
	const huge = 2 << 20
	base := int64(uintptr(unsafe.Pointer(unsafe.SliceData(mp.m))))
	start := max((base+off)&^(huge-1)-base, 0)
	end := min((base+off+int64(n)+huge-1)&^(huge-1)-base, int64(len(mp.m)))
	if start < end {
		_ = madviseDontNeed(mp.m[start:end])
	}
}

// unmap releases the mapping for good.
func (mp *fileMap) unmap() error {
	mp.mu.Lock()
	defer mp.mu.Unlock()
	mp.tried, mp.closed = true, true
	if mp.m == nil {
		return nil
	}
	err := munmap(mp.m)
	mp.m = nil
	return err
}

// release drops the pages of [off, off+n) from the mapping, if there is
// one, so that dropping those pages from the page cache can work (mapped
// pages stay).
func (mp *fileMap) release(off, n int64) {
	mp.mu.RLock()
	if mp.m != nil && off >= 0 && n > 0 && off < int64(len(mp.m)) {
		mp.releaseLocked(off, int(min(n, int64(len(mp.m))-off)))
	}
	mp.mu.RUnlock()
}

// mapFile maps a file for fileMap; tests replace it to make mapping fail.
var mapFile = mmapRead

// callMapped runs fn(part), part a slice of the mapping whole, turning a
// memory fault inside whole (SIGBUS past the end of a shrunk file or on a
// page the kernel could not read) into fault = true. Other panics go on.
func callMapped(whole, part []byte, fn func([]byte) error) (err error, fault bool) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if a, ok := r.(interface{ Addr() uintptr }); ok {
			base := uintptr(unsafe.Pointer(unsafe.SliceData(whole)))
			if addr := a.Addr(); addr >= base && addr-base < uintptr(len(whole)) {
				fault = true
				return
			}
		}
		panic(r)
	}()
	return fn(part), false
}
