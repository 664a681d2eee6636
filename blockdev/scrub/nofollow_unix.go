//go:build unix

package scrub

import "syscall"

// oNoFollow makes an open fail on a symbolic link (ELOOP): state files are
// never created or truncated through one.
const oNoFollow = syscall.O_NOFOLLOW
