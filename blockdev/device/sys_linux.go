//go:build linux

package device

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// oDirect is the open flag for direct I/O, 0 where there is none.
const oDirect = unix.O_DIRECT

// control runs fn on the file's descriptor and returns fn's error.
func control(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// blockGeometry returns the size and the logical and physical block sizes of
// the block device open as f.
func blockGeometry(f *os.File) (size int64, lbs, pbs int, err error) {
	err = control(f, func(fd int) error {
		var sz uint64
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.BLKGETSIZE64, uintptr(unsafe.Pointer(&sz))); e != 0 {
			return os.NewSyscallError("ioctl BLKGETSIZE64", e)
		}
		l, err := unix.IoctlGetInt(fd, unix.BLKSSZGET)
		if err != nil {
			return os.NewSyscallError("ioctl BLKSSZGET", err)
		}
		p, err := unix.IoctlGetUint32(fd, unix.BLKPBSZGET)
		if err != nil {
			return os.NewSyscallError("ioctl BLKPBSZGET", err)
		}
		size, lbs, pbs = int64(sz), l, int(p)
		return nil
	})
	return size, lbs, pbs, err
}

// dioAlign returns the memory and file-offset alignment that O_DIRECT needs
// on f, as reported by statx(STATX_DIOALIGN) (Linux 6.1 and later).
// ok is false when the kernel or filesystem does not say.
func dioAlign(f *os.File) (mem, off int, ok bool) {
	_ = control(f, func(fd int) error {
		var st unix.Statx_t
		if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_DIOALIGN, &st); err != nil {
			return err
		}
		if st.Mask&unix.STATX_DIOALIGN != 0 && st.Dio_offset_align != 0 {
			mem, off, ok = int(st.Dio_mem_align), int(st.Dio_offset_align), true
		}
		return nil
	})
	return mem, off, ok
}

func fdatasync(f *os.File) error {
	return control(f, func(fd int) error {
		for {
			err := unix.Fdatasync(fd)
			if err != unix.EINTR {
				return err
			}
		}
	})
}

func fadviseDontNeed(f *os.File, off, n int64) error {
	return control(f, func(fd int) error {
		return unix.Fadvise(fd, off, n, unix.FADV_DONTNEED)
	})
}

func startWriteback(f *os.File, off, n int64) error {
	return control(f, func(fd int) error {
		return unix.SyncFileRange(fd, off, n, unix.SYNC_FILE_RANGE_WRITE)
	})
}

func punchHole(f *os.File, off, n int64) error {
	err := control(f, func(fd int) error {
		return unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	})
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		return errors.ErrUnsupported
	}
	return err
}

// blkZeroOut zeroes a range of a block device (BLKZEROOUT): with the
// device's write-zeroes command where it has one, by writing zero pages
// otherwise. Unlike BLKDISCARD it guarantees that the range reads as zeros.
func blkZeroOut(f *os.File, off, n int64) error {
	err := control(f, func(fd int) error {
		r := [2]uint64{uint64(off), uint64(n)}
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.BLKZEROOUT, uintptr(unsafe.Pointer(&r[0]))); e != 0 {
			return e
		}
		return nil
	})
	if errors.Is(err, unix.EOPNOTSUPP) {
		return errors.ErrUnsupported
	}
	return err
}

// seekData returns the data extent of f that starts at or contains off,
// io.EOF when only holes follow, or errors.ErrUnsupported when the
// filesystem cannot tell.
func seekData(f *os.File, off int64) (Extent, error) {
	var e Extent
	err := control(f, func(fd int) error {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err != nil {
			return err
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		e = Extent{Off: data, Len: hole - data}
		return nil
	})
	switch {
	case errors.Is(err, unix.ENXIO):
		return Extent{}, io.EOF
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.EOPNOTSUPP):
		return Extent{}, errors.ErrUnsupported
	}
	return e, err
}

// clearDirect turns O_DIRECT off on an open file.
func clearDirect(f *os.File) error {
	return control(f, func(fd int) error {
		fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
		if err != nil {
			return err
		}
		_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_DIRECT)
		return err
	})
}

// preferredIOSize returns the filesystem's preferred I/O size (st_blksize).
func preferredIOSize(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Blksize)
	}
	return 0
}

// mmapRead maps the first size bytes of f read-only and shared.
func mmapRead(f *os.File, size int64) ([]byte, error) {
	if size <= 0 || int64(int(size)) != size {
		return nil, errors.ErrUnsupported
	}
	var m []byte
	err := control(f, func(fd int) error {
		var err error
		m, err = unix.Mmap(fd, 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
		return err
	})
	if err != nil {
		return nil, os.NewSyscallError("mmap", err)
	}
	return m, nil
}

func munmap(m []byte) error { return unix.Munmap(m) }

func madviseDontNeed(b []byte) error { return unix.Madvise(b, unix.MADV_DONTNEED) }
