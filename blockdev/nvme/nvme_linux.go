//go:build linux

package nvme

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// passthru64 is struct nvme_passthru_cmd64 of <linux/nvme_ioctl.h>: 80 bytes,
// the same layout on every Linux architecture (the 64-bit fields sit at
// offsets 16, 24 and 72).
type passthru64 struct {
	opcode      uint8
	flags       uint8
	rsvd1       uint16
	nsid        uint32
	cdw2        uint32
	cdw3        uint32
	metadata    uint64 // user address of the metadata buffer
	addr        uint64 // user address of the data buffer
	metadataLen uint32
	dataLen     uint32
	cdw10       uint32
	cdw11       uint32
	cdw12       uint32
	cdw13       uint32
	cdw14       uint32
	cdw15       uint32
	timeoutMS   uint32
	rsvd2       uint32
	result      uint64
}

// The ioctl numbers: _IO('N', 0x40), and _IOWR('N', 0x47 or 0x48,
// struct nvme_passthru_cmd64).
const (
	ioctlID      = 0x4e40
	ioctlAdmin64 = 0xc0000000 | unsafe.Sizeof(passthru64{})<<16 | 0x4e47
	ioctlIO64    = 0xc0000000 | unsafe.Sizeof(passthru64{})<<16 | 0x4e48
)

// Opcodes.
const (
	opIdentify = 0x06 // admin
	opWrite    = 0x01 // NVM I/O
	opRead     = 0x02 // NVM I/O
)

// submit issues one passthrough command whose buffers (c's addresses,
// taken with addr) are bufs, and keeps them alive and in place until the
// ioctl returns. The command holds their addresses as integers, which
// neither keep a buffer alive nor follow it if it moves: a buffer on a
// goroutine's stack moves when the stack grows, between addr and the
// ioctl (f.SyscallConn and Control are calls), and the kernel then writes
// into the old stack. Pinning makes every buffer passed here a heap
// object (escape analysis sees it escape) that stays put until Unpin.
func submit(f *os.File, req uintptr, op string, c *passthru64, bufs ...[]byte) error {
	var pin runtime.Pinner
	defer pin.Unpin()
	for _, b := range bufs {
		if len(b) > 0 {
			pin.Pin(&b[0])
		}
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("nvme: %s: %w", op, err)
	}
	var r1 uintptr
	var errno unix.Errno
	if err := rc.Control(func(fd uintptr) {
		r1, _, errno = unix.Syscall(unix.SYS_IOCTL, fd, req, uintptr(unsafe.Pointer(c)))
	}); err != nil {
		return fmt.Errorf("nvme: %s: %w", op, err)
	}
	runtime.KeepAlive(bufs)
	switch {
	case errno == unix.ENOTTY:
		return fmt.Errorf("%w: %s: %s", ErrNotNVMe, f.Name(), errno)
	case errno == unix.EACCES || errno == unix.EPERM:
		return fmt.Errorf("%w: %s on %s: %w", ErrDenied, op, f.Name(), errno)
	case errno != 0:
		return fmt.Errorf("nvme: %s on %s: %w", op, f.Name(), errno)
	case r1 != 0:
		return &StatusError{Op: op, Status: uint32(r1)}
	}
	return nil
}

// addr is the address of b's first byte, for a command's buffer fields;
// b must be among the buffers passed to submit with the command.
func addr(b []byte) uint64 {
	if len(b) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(&b[0])))
}

// NamespaceID returns the namespace ID of an NVMe namespace's block or
// generic character device.
func NamespaceID(f *os.File) (uint32, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("nvme: %w", err)
	}
	var r1 uintptr
	var errno unix.Errno
	if err := rc.Control(func(fd uintptr) {
		r1, _, errno = unix.Syscall(unix.SYS_IOCTL, fd, ioctlID, 0)
	}); err != nil {
		return 0, fmt.Errorf("nvme: %w", err)
	}
	if errno != 0 {
		if errno == unix.ENOTTY || errno == unix.EINVAL {
			return 0, fmt.Errorf("%w: %s: %s", ErrNotNVMe, f.Name(), errno)
		}
		return 0, fmt.Errorf("nvme: namespace id of %s: %w", f.Name(), errno)
	}
	return uint32(r1), nil
}

// IdentifyNamespace reads the format of the namespace f is a block or
// generic character device of.
func IdentifyNamespace(f *os.File) (Namespace, error) {
	nsid, err := NamespaceID(f)
	if err != nil {
		return Namespace{}, err
	}
	buf := make([]byte, 4096)
	c := passthru64{opcode: opIdentify, nsid: nsid, addr: addr(buf), dataLen: uint32(len(buf)), cdw10: 0x00} // CNS 0
	if err := submit(f, ioctlAdmin64, "identify namespace", &c, buf); err != nil {
		return Namespace{}, err
	}
	ns := Namespace{ID: nsid, Blocks: binary.LittleEndian.Uint64(buf[0:])}
	flbas := buf[26]
	idx := int(flbas&0xf) | int(flbas>>5&3)<<4
	nlbaf := int(buf[25]) + 1
	if idx >= nlbaf || idx >= 64 {
		return Namespace{}, fmt.Errorf("nvme: namespace %d: format index %d of %d formats", nsid, idx, nlbaf)
	}
	lbaf := binary.LittleEndian.Uint32(buf[128+4*idx:])
	ns.MetadataSize = int(lbaf & 0xffff)
	lbads := lbaf >> 16 & 0xff
	if lbads < 9 || lbads > 31 {
		return Namespace{}, fmt.Errorf("nvme: namespace %d: LBADS %d", nsid, lbads)
	}
	ns.LBASize = 1 << lbads
	ns.Extended = flbas&0x10 != 0
	ns.PIType = int(buf[29] & 7)
	ns.PIFirst = buf[29]&8 != 0

	// The NVM Command Set Identify Namespace (CNS 05h, CSI 00h) holds the
	// extended LBA formats: the guard format and the storage tag size.
	nvm := make([]byte, 4096)
	c = passthru64{opcode: opIdentify, nsid: nsid, addr: addr(nvm), dataLen: uint32(len(nvm)), cdw10: 0x05}
	err = submit(f, ioctlAdmin64, "identify namespace (NVM command set)", &c, nvm)
	var se *StatusError
	switch {
	case errors.As(err, &se):
		return ns, nil // no such page: 16-bit guard, no storage tag
	case err != nil:
		return Namespace{}, err
	}
	elbaf := binary.LittleEndian.Uint32(nvm[12+4*idx:])
	ns.STS = int(elbaf & 0x7f)
	ns.Guard = int(elbaf >> 7 & 3)
	return ns, nil
}

// Read reads n blocks from lba of namespace nsid (see NamespaceID) into data
// and, for a namespace with metadata, their metadata into md, with the
// controller's protection checks off (PRINFO 0: PRACT and PRCHK clear), so
// that the tuples come back as stored. For a separate-metadata (DIX) format
// data holds n*LBASize bytes and md n*MetadataSize; for an extended format
// data holds n*(LBASize+MetadataSize) bytes and md is empty. n is at most
// 65536 and the transfer within the controller's limit (MDTS).
func Read(f *os.File, nsid uint32, lba uint64, n int, data, md []byte) error {
	return rw(f, opRead, nsid, lba, n, data, md, Protection{})
}

// Write writes n blocks at lba of namespace nsid from data and md, laid out
// as for Read, with the protection prot: with PRACT clear and the PRCHK
// bits set (CheckAll) the controller checks the PI given in the metadata
// against the data and prot's tags before it stores anything, and refuses
// the write with a *StatusError matching dif.ErrIntegrity if a check
// fails.
func Write(f *os.File, nsid uint32, lba uint64, n int, data, md []byte, prot Protection) error {
	return rw(f, opWrite, nsid, lba, n, data, md, prot)
}

func rw(f *os.File, op uint8, nsid uint32, lba uint64, n int, data, md []byte, prot Protection) error {
	name := "read"
	if op == opWrite {
		name = "write"
	}
	if n < 1 || n > 1<<16 {
		return fmt.Errorf("nvme: %s of %d blocks", name, n)
	}
	c := passthru64{
		opcode:      op,
		nsid:        nsid,
		addr:        addr(data),
		dataLen:     uint32(len(data)),
		metadata:    addr(md),
		metadataLen: uint32(len(md)),
		cdw10:       uint32(lba),
		cdw11:       uint32(lba >> 32),
		cdw12:       uint32(n-1) | prot.cdw12(), // NLB, 0-based
		cdw3:        uint32(prot.Ref >> 32),
		cdw14:       uint32(prot.Ref),
		cdw15:       uint32(prot.AppMask)<<16 | uint32(prot.App),
	}
	return submit(f, ioctlIO64, fmt.Sprintf("%s of %d blocks at %d", name, n, lba), &c, data, md)
}

// dropCache drops the page cache's clean copies of bytes [off, off+n) of
// the namespace's block device f (posix_fadvise DONTNEED), after a
// passthrough write that bypassed it: a buffered reader (another process,
// or the kernel's own readahead) then reads the blocks from the device
// rather than the data they held before. Pages mapped or dirtied by
// another writer stay; on the generic character device there is no page
// cache. Failures are ignored: the write itself succeeded.
func dropCache(f *os.File, off, n int64) {
	_ = unix.Fadvise(int(f.Fd()), off, n, unix.FADV_DONTNEED)
}
