//go:build unix

package pebble

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"

	"github.com/difctl/difctl/store"
)

// Store locks. Pebble locks its directory with an exclusive fcntl lock on
// the file LOCK, which it opens read-write, so a user who may only read a
// store cannot open it at all, and two readers exclude each other. The
// store's file system takes the lock itself instead: exclusive (F_WRLCK) for
// a store opened read-write, shared (F_RDLCK, the file opened read-only)
// for one opened ReadOnly. Readers then share the store; a writer excludes
// everyone (a reader must not run beside a writer, whose compactions
// delete the tables the reader has open). A refused lock names its holder:
// F_GETLK reports the pid of the process holding the conflicting lock and
// /proc/PID/cmdline its command line, with nothing to write, go stale or
// clean up.

// heldLocks counts, per lock file, the locks this process holds: -1 for an
// exclusive one, n > 0 for n shared ones. fcntl locks belong to the
// process, so a second lock taken by the same process would succeed
// silently; this map refuses it as another process would be refused.
var heldLocks struct {
	sync.Mutex
	m map[string]int
}

type storeLock struct {
	name string
	f    *os.File
}

func (l *storeLock) Close() error {
	heldLocks.Lock()
	defer heldLocks.Unlock()
	if n := heldLocks.m[l.name]; n > 1 {
		heldLocks.m[l.name] = n - 1
	} else {
		delete(heldLocks.m, l.name)
	}
	return l.f.Close() // closing the file releases the fcntl lock
}

// lockStore locks the lock file name, shared when readOnly. dir is the
// store, for messages.
func lockStore(dir, name string, readOnly bool) (io.Closer, error) {
	heldLocks.Lock()
	defer heldLocks.Unlock()
	if heldLocks.m == nil {
		heldLocks.m = map[string]int{}
	}
	if n := heldLocks.m[name]; n < 0 || n > 0 && !readOnly {
		return nil, &store.BusyError{Path: dir, PID: os.Getpid(), Self: true}
	}
	flags, typ := os.O_RDWR|os.O_CREATE, int16(unix.F_WRLCK)
	if readOnly {
		flags, typ = os.O_RDONLY, unix.F_RDLCK
	}
	f, err := os.OpenFile(name, flags|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if readOnly && errors.Is(err, os.ErrNotExist) {
		// A lost LOCK file is harmless: make a new one if we may.
		f, err = os.OpenFile(name, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	}
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%w: lock file %s is not a regular file", store.ErrNotStore, name)
	}
	spec := unix.Flock_t{Type: typ, Whence: io.SeekStart}
	if err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &spec); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
			q := unix.Flock_t{Type: typ, Whence: io.SeekStart}
			if unix.FcntlFlock(f.Fd(), unix.F_GETLK, &q) == nil && q.Type != unix.F_UNLCK && q.Pid > 0 {
				return nil, &store.BusyError{Path: dir, PID: int(q.Pid), Command: processCommand(int(q.Pid))}
			}
			return nil, &store.BusyError{Path: dir}
		}
		return nil, err
	}
	if readOnly {
		heldLocks.m[name]++
	} else {
		heldLocks.m[name] = -1
	}
	return &storeLock{name: name, f: f}, nil
}

// processCommand returns the command line of process pid, or "" if it
// cannot be read (another system, a process that has just exited).
func processCommand(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return ""
	}
	b = bytes.TrimRight(b, "\x00")
	b = bytes.ReplaceAll(b, []byte{0}, []byte{' '})
	if len(b) > 256 {
		b = append(b[:256], "..."...)
	}
	return string(b)
}

// restrict makes a file the store writes 0600.
func restrict(f vfs.File) {
	if fd := f.Fd(); fd != vfs.InvalidFd {
		_ = unix.Fchmod(int(fd), 0o600)
	}
}
