//go:build !linux

package nbd

import "net"

// unixPeer: this system's peer credentials are not used; every
// unix-socket client is one peer.
func unixPeer(*net.UnixConn) (string, bool) { return "", false }
