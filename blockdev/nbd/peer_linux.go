package nbd

import (
	"net"
	"strconv"

	"golang.org/x/sys/unix"
)

// unixPeer names a unix-socket client by its user id (SO_PEERCRED).
func unixPeer(uc *net.UnixConn) (string, bool) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return "", false
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return "", false
	}
	return "uid:" + strconv.FormatUint(uint64(cred.Uid), 10), true
}
