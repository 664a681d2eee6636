package blockdev

import (
	"errors"
	"fmt"
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
	mu    sync.RWMutex
	tried bool
	m     []byte
	err   error // why there is no mapping
}

// ReadMapped implements [Mapper]. The whole file is mapped at the first
// call, unless it was opened with direct I/O (whose point is to keep its
// data out of the page cache).
func (d *File) ReadMapped(off int64, n int, fn func([]byte) error) error {
	if d.closed.Load() {
		return ErrClosed
	}
	if err := checkRange("read", off, int64(n), d.size); err != nil {
		return err
	}
	mp := &d.mp
	mp.mu.RLock()
	if !mp.tried {
		mp.mu.RUnlock()
		mp.mu.Lock()
		if !mp.tried && !d.closed.Load() {
			mp.tried = true
			if d.direct != nil {
				mp.err = errors.ErrUnsupported
			} else {
				mp.m, mp.err = mmapRead(d.f, d.size)
			}
		}
		mp.mu.Unlock()
		mp.mu.RLock()
	}
	defer mp.mu.RUnlock()
	if d.closed.Load() {
		return ErrClosed
	}
	if mp.m == nil {
		err := mp.err
		if err == nil {
			err = errors.ErrUnsupported
		}
		return fmt.Errorf("blockdev: %s cannot be mapped: %w", d.path, err)
	}
	if n == 0 {
		return fn(nil)
	}
	err, fault := callMapped(mp.m, mp.m[off:off+int64(n)], fn)
	if fault {
		return &IOError{Op: "read", Off: off, Len: int64(n), Err: ErrMapFault}
	}
	return err
}

// unmap releases the mapping. Caller has marked d closed.
func (d *File) unmap() error {
	mp := &d.mp
	mp.mu.Lock()
	defer mp.mu.Unlock()
	mp.tried = true
	if mp.m == nil {
		return nil
	}
	err := munmap(mp.m)
	mp.m = nil
	return err
}

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
