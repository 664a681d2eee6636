package main

import (
	"net"

	"golang.org/x/sys/unix"
)

// peerCred returns the user and process of the other end of a unix socket
// connection (SO_PEERCRED: as they were when it connected); known is
// false where the system does not tell.
func peerCred(c *net.UnixConn) (uid, pid int, known bool, err error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, 0, false, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, 0, false, err
	}
	if cerr != nil {
		return 0, 0, false, cerr
	}
	return int(cred.Uid), int(cred.Pid), true, nil
}
