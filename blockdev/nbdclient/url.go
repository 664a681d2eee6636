package nbdclient

import (
	"errors"
	"net"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/difctl/difctl/blockdev/internal/nbdproto"
)

// target is a parsed NBD URL (NetworkBlockDevice/nbd doc/uri.md).
type target struct {
	tls      bool
	network  string // "tcp" or "unix"
	addr     string // host:port, or the socket's path ("@name" for an abstract socket)
	host     string // the TCP host, without brackets; "" for unix sockets
	export   string
	tlsHost  string // tls-hostname
	tlsDir   string // tls-certificates
	redacted string // the URL without userinfo
}

// parseURL parses an NBD URL:
//
//	nbd://host[:port][/export]           TCP, port 10809 by default
//	nbds://host[:port][/export]          TCP with TLS required
//	nbd+unix:///[export]?socket=PATH     a unix socket
//	nbds+unix:///[export]?socket=PATH    a unix socket with TLS required
//
// The export name is the path after its first slash, percent-decoded. The
// query parameters understood are socket (unix schemes only), and for the
// TLS schemes tls-hostname, tls-certificates (a directory holding
// ca-cert.pem, and client-cert.pem with client-key.pem, as libnbd and qemu
// name them), tls-type=x509 and tls-verify-peer=1. Any other parameter, a
// repeated one, userinfo with a password... are refused rather than
// ignored (the URI document asks clients to diagnose what they do not
// understand); a user name alone is accepted and unused (it names the
// user of TLS-PSK, which this client does not speak).
func parseURL(raw string) (*target, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error quotes the whole URL, credentials included: only its
		// cause is kept.
		reason := "not a URL"
		var ue *url.Error
		if errors.As(err, &ue) {
			reason = ue.Err.Error()
		}
		return nil, &URLError{URL: "(unparsable)", Reason: reason}
	}
	red := *u
	red.User = nil
	t := &target{redacted: red.String()}
	bad := func(reason string) (*target, error) {
		return nil, &URLError{URL: t.redacted, Reason: reason}
	}
	if _, hasPass := u.User.Password(); hasPass {
		return bad("a password in the URL is not supported (and is never sent)")
	}
	switch strings.ToLower(u.Scheme) {
	case "nbd":
		t.network = "tcp"
	case "nbds":
		t.network, t.tls = "tcp", true
	case "nbd+unix":
		t.network = "unix"
	case "nbds+unix":
		t.network, t.tls = "unix", true
	case "":
		return bad("no scheme: want nbd://, nbds://, nbd+unix:// or nbds+unix://")
	default:
		return bad("scheme " + strconv.Quote(u.Scheme) + " is not nbd, nbds, nbd+unix or nbds+unix")
	}
	if u.Opaque != "" {
		return bad("no // after the scheme")
	}
	if u.Fragment != "" || u.RawFragment != "" {
		return bad("a fragment (#...) has no meaning in an NBD URL")
	}
	if u.Path != "" && !strings.HasPrefix(u.Path, "/") {
		return bad("the path must start with /")
	}
	t.export = strings.TrimPrefix(u.Path, "/")
	if len(t.export) > nbdproto.MaxStringBytes {
		return bad("export name longer than 4096 bytes")
	}
	if strings.IndexByte(t.export, 0) >= 0 || !utf8.ValidString(t.export) {
		return bad("export name is not UTF-8 text without NUL")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return bad("malformed query")
	}
	one := func(k string) (string, bool, error) {
		v, ok := q[k]
		if !ok {
			return "", false, nil
		}
		delete(q, k)
		if len(v) != 1 {
			return "", true, &URLError{URL: t.redacted, Reason: "query parameter " + k + " given more than once"}
		}
		return v[0], true, nil
	}
	sock, hasSock, err := one("socket")
	if err != nil {
		return nil, err
	}
	if t.network == "unix" {
		if u.Host != "" || u.User != nil {
			return bad("a unix-socket URL has no host: write nbd+unix:///export?socket=PATH")
		}
		if sock == "" {
			return bad("no socket=PATH query parameter")
		}
		if sock[0] == 0 {
			// The abstract namespace (Linux), as Go's net package names it.
			sock = "@" + sock[1:]
		}
		t.addr = sock
	} else {
		if hasSock {
			return bad("socket= is for the nbd+unix and nbds+unix schemes")
		}
		t.host = u.Hostname()
		if t.host == "" {
			return bad("no host")
		}
		port := u.Port()
		if port == "" {
			if strings.HasSuffix(u.Host, ":") {
				return bad("empty port")
			}
			port = defaultPort
		}
		if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
			return bad("port " + strconv.Quote(port) + " is not 1 to 65535")
		}
		t.addr = net.JoinHostPort(t.host, port)
	}
	for _, k := range []string{"tls-hostname", "tls-certificates", "tls-type", "tls-verify-peer"} {
		v, ok, err := one(k)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if !t.tls {
			return bad(k + " is for the nbds and nbds+unix schemes (TLS)")
		}
		switch k {
		case "tls-hostname":
			if v == "" {
				return bad("empty tls-hostname")
			}
			t.tlsHost = v
		case "tls-certificates":
			if v == "" {
				return bad("empty tls-certificates")
			}
			t.tlsDir = v
		case "tls-type":
			if v != "x509" {
				return bad("tls-type " + strconv.Quote(v) + " is not supported (only x509)")
			}
		case "tls-verify-peer":
			if v != "1" && v != "true" {
				return bad("tls-verify-peer=" + v + " is not supported: the server's certificate is always verified")
			}
		}
	}
	for k := range q {
		return bad("unknown query parameter " + strconv.Quote(k))
	}
	return t, nil
}
