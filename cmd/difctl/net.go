package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/difctl/difctl/blockdev/nbd"
)

// handshakeLogMax is how many failed TLS handshakes serve reports a minute.
const handshakeLogMax = 10

// handshakeLog reports the failed TLS handshakes of serve's clients
// (nbd.Options.OnConnError, errors matching nbd.ErrTLSHandshake), one line
// each with the client and the reason, at most max in each window of per
// (a minute but in tests). The number of those it did not print follows
// in one line when the window ends, so that a flood of bad handshakes
// costs a line or two a window.
type handshakeLog struct {
	w   io.Writer
	max int
	per time.Duration

	mu      sync.Mutex
	start   time.Time // of the window
	n       int       // lines printed in the window
	dropped int       // failures not printed in the window
	timer   *time.Timer
}

func newHandshakeLog(w io.Writer) *handshakeLog {
	return &handshakeLog{w: w, max: handshakeLogMax, per: time.Minute}
}

// connError is the server's OnConnError.
func (l *handshakeLog) connError(remote string, err error) {
	if !errors.Is(err, nbd.ErrTLSHandshake) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if now.Sub(l.start) >= l.per {
		l.flushLocked()
		l.start, l.n = now, 0
	}
	if l.n >= l.max {
		if l.dropped == 0 {
			l.timer = time.AfterFunc(l.start.Add(l.per).Sub(now), l.flush)
		}
		l.dropped++
		return
	}
	l.n++
	fmt.Fprintf(l.w, "difctl: client %s: %s\n", printable(remote), printable(strings.TrimPrefix(oneLine(err.Error()), "nbd: ")))
}

// flush prints the number of failures not printed, if any. serve calls it
// when it stops.
func (l *handshakeLog) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flushLocked()
}

func (l *handshakeLog) flushLocked() {
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	if l.dropped > 0 {
		fmt.Fprintf(l.w, "difctl: %d more failed TLS handshakes not shown (at most %d lines a minute)\n", l.dropped, l.max)
		l.dropped = 0
	}
}

// tlsConfig loads the server's certificate and, if asked, the CAs that
// client certificates must chain to.
func tlsConfig(o *serveOptions) (*tls.Config, error) {
	if o.TLSCert == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s and key %s: %w", o.TLSCert, o.TLSKey, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if o.ClientCA != "" {
		pem, err := os.ReadFile(o.ClientCA)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no PEM certificate", o.ClientCA)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// listenUnix listens on a unix socket created with mode 0600. A stale
// socket (connections refused: its server is gone) is replaced; anything
// else at path, a symbolic link included, is kept and refused. A path
// longer than a socket address holds is bound through its folder
// (unixName).
func listenUnix(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			return nil, fmt.Errorf("%s is a symbolic link (difctl does not follow it)", path)
		case fi.Mode()&os.ModeSocket == 0:
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		c, err := dialUnix(path, time.Second)
		switch {
		case err == nil:
			c.Close()
			return nil, fmt.Errorf("%s: another server is listening there", path)
		case !errors.Is(err, syscall.ECONNREFUSED):
			return nil, fmt.Errorf("%s: cannot tell whether a server listens there: %w", path, unwrapPath(err))
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	name, done, err := unixName(path)
	if err != nil {
		return nil, err
	}
	old := syscall.Umask(0o177)
	l, err := net.Listen("unix", name)
	syscall.Umask(old)
	done()
	if err != nil {
		return nil, err
	}
	if name != path {
		// The name is good only while done's descriptor was open: remove
		// the socket by its path.
		l.(*net.UnixListener).SetUnlinkOnClose(false)
		l = &aliasListener{Listener: l, path: path}
	}
	// The umask made it 0600; a mode that is not is refused, and the path
	// is not followed to find out.
	if fi, err := os.Lstat(path); err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		l.Close()
		if err == nil {
			err = fmt.Errorf("%s is not the socket just made, mode 0600 (mode %v)", path, fi.Mode())
		}
		return nil, err
	}
	return l, nil
}

// dialUnix connects to the unix socket at path, of any length (unixName).
func dialUnix(path string, timeout time.Duration) (net.Conn, error) {
	name, done, err := unixName(path)
	if err != nil {
		return nil, err
	}
	defer done()
	return net.DialTimeout("unix", name, timeout)
}

// maxUnixPath is the longest path a unix socket address holds everywhere
// (108 bytes with the NUL on Linux, 104 on the BSDs).
const maxUnixPath = 103

// unixName returns a name to bind or dial the unix socket at path with:
// path itself, or, when it is too long for a socket address, on Linux,
// /proc/self/fd/N/NAME through a descriptor of its folder, which done
// closes.
func unixName(path string) (name string, done func(), err error) {
	if len(path) <= maxUnixPath || runtime.GOOS != "linux" {
		return path, func() {}, nil
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return "", nil, err
	}
	name = fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(path))
	if len(name) > maxUnixPath {
		dir.Close()
		return path, func() {}, nil // too long either way: as the system says
	}
	return name, func() { dir.Close() }, nil
}

// aliasListener is a unix socket listener bound under another name than
// its path (unixName): it reports the path, and removes it when closed.
type aliasListener struct {
	net.Listener
	path string
}

func (l *aliasListener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

func (l *aliasListener) Close() error {
	err := l.Listener.Close()
	os.Remove(l.path)
	return err
}

// exportURI is the NBD URI of an export (the syntax of the NBD URI
// standard that qemu and libnbd accept).
func exportURI(a net.Addr, name string, tlsOn bool) string {
	if a.Network() == "unix" {
		path := a.String()
		if abs, err := filepath.Abs(path); err == nil {
			path = abs
		}
		return fmt.Sprintf("nbd+unix:///%s?socket=%s", escapeExportName(name), queryEscape(path))
	}
	scheme := "nbd"
	if tlsOn {
		scheme = "nbds"
	}
	host := a.String()
	if ta, ok := a.(*net.TCPAddr); ok && ta.IP.IsUnspecified() {
		host = net.JoinHostPort("localhost", fmt.Sprint(ta.Port))
	}
	return fmt.Sprintf("%s://%s/%s", scheme, host, escapeExportName(name))
}

// escapeExportName escapes an export name for the path of an NBD URI,
// keeping its slashes: the export name is the whole path after the first
// slash (nbd+unix:///a/disk.img is the export a/disk.img).
func escapeExportName(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

// queryEscape escapes a socket path for a URI query, leaving the slashes
// and other characters a path usually holds as they are.
func queryEscape(s string) string {
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("/._-~", c)) {
			return url.QueryEscape(s)
		}
	}
	return s
}
