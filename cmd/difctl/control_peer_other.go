//go:build !linux

package main

import "net"

// peerCred: elsewhere than Linux the peer is not asked (known is false);
// the socket's mode, 0600, keeps other users out.
func peerCred(*net.UnixConn) (uid, pid int, known bool, err error) { return 0, 0, false, nil }
