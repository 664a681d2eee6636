package nbdclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"time"
)

// Defaults of [Options].
const (
	DefaultDialTimeout      = 30 * time.Second
	DefaultRequestTimeout   = 60 * time.Second
	DefaultMaxInflight      = 64
	DefaultMaxInflightBytes = 64 << 20
	DefaultMaxPayload       = 32 << 20
)

// Options configure Open. The zero value is ready to use.
type Options struct {
	// TLS, if set, is the TLS configuration of nbds and nbds+unix URLs
	// (cloned; a MinVersion below TLS 1.2 is raised to it). Unset, one is
	// made from the TLS* fields below and the URL's tls-certificates
	// directory, verifying the server against TLSCAFile, or the system's
	// roots without one. TLS settings with a plaintext URL (nbd://,
	// nbd+unix://) are an error: TLS is used exactly when the URL says so.
	TLS *tls.Config
	// TLSCAFile is a PEM file of the CAs that sign the server's
	// certificate. Default: the URL's tls-certificates/ca-cert.pem if
	// the URL names a directory, else the system's roots.
	TLSCAFile string
	// TLSCertFile and TLSKeyFile are the client's certificate and key
	// (PEM), for servers that require one. Default: the URL's
	// tls-certificates/client-cert.pem and client-key.pem when both
	// exist, else none.
	TLSCertFile, TLSKeyFile string
	// TLSServerName is the name the server's certificate must bear.
	// Default: the URL's tls-hostname, else TLS.ServerName, else the
	// URL's host (a unix-socket URL has none: one of the others must be
	// set).
	TLSServerName string
	// ReadOnly refuses WriteAt and Discard with device.ErrReadOnly, even
	// when the export is writable.
	ReadOnly bool
	// DialTimeout bounds connecting, TLS and the negotiation together
	// (the context given to Open can end them sooner). Default
	// DefaultDialTimeout (30 s).
	DialTimeout time.Duration
	// RequestTimeout bounds the wait for each request's reply; a request
	// without one in time ends the connection (a *ConnError matching
	// ErrTimeout), since the protocol has no way to cancel a request.
	// Default DefaultRequestTimeout (60 s); negative: no limit.
	RequestTimeout time.Duration
	// MaxInflight bounds the requests sent and not yet answered, and
	// MaxInflightBytes their payloads (WRITE data sent, READ data
	// expected); a request larger than MaxInflightBytes is sent alone.
	// Defaults DefaultMaxInflight (64) and DefaultMaxInflightBytes
	// (64 MiB).
	MaxInflight      int
	MaxInflightBytes int
	// MaxPayload caps the length of one request; longer transfers are
	// split. The server's advertised maximum lowers it. Default
	// DefaultMaxPayload (32 MiB, the largest request the protocol says
	// every server should accept).
	MaxPayload int
	// BlockSize, if set, raises the logical block size the device
	// reports (a power of two, 512 to 65536): for example 4096 to give a
	// volume 4 KiB-aligned I/O on an export whose minimum block size is
	// smaller. The export's size must be a multiple of it.
	BlockSize int
}

// normalize fills in the defaults and checks the values.
func (o *Options) normalize() error {
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.DialTimeout < 0 {
		return errors.New("nbdclient: negative DialTimeout")
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.MaxInflight == 0 {
		o.MaxInflight = DefaultMaxInflight
	}
	if o.MaxInflight < 1 || o.MaxInflight > 1<<16 {
		return fmt.Errorf("nbdclient: MaxInflight %d, want 1 to 65536", o.MaxInflight)
	}
	if o.MaxInflightBytes == 0 {
		o.MaxInflightBytes = DefaultMaxInflightBytes
	}
	if o.MaxInflightBytes < 0 {
		return fmt.Errorf("nbdclient: MaxInflightBytes %d", o.MaxInflightBytes)
	}
	if o.MaxPayload == 0 {
		o.MaxPayload = DefaultMaxPayload
	}
	if o.MaxPayload < 512 || o.MaxPayload > 1<<30 {
		return fmt.Errorf("nbdclient: MaxPayload %d, want 512 bytes to 1 GiB", o.MaxPayload)
	}
	if o.BlockSize != 0 && (o.BlockSize < 512 || o.BlockSize > 1<<16 || bits.OnesCount(uint(o.BlockSize)) != 1) {
		return fmt.Errorf("nbdclient: BlockSize %d is not a power of two from 512 to 65536", o.BlockSize)
	}
	if (o.TLSCertFile == "") != (o.TLSKeyFile == "") {
		return errors.New("nbdclient: TLSCertFile and TLSKeyFile go together")
	}
	return nil
}

// hasTLS reports whether any TLS setting is given.
func (o *Options) hasTLS() bool {
	return o.TLS != nil || o.TLSCAFile != "" || o.TLSCertFile != "" || o.TLSServerName != ""
}

// tlsConfig returns the TLS configuration for t (a TLS URL).
func (o *Options) tlsConfig(t *target) (*tls.Config, error) {
	var cfg *tls.Config
	if o.TLS != nil {
		if o.TLSCAFile != "" || o.TLSCertFile != "" || t.tlsDir != "" {
			return nil, errors.New("nbdclient: Options.TLS and certificate files (Options.TLS*File, tls-certificates) both given: use one")
		}
		cfg = o.TLS.Clone()
	} else {
		cfg = &tls.Config{}
		caFile, certFile, keyFile := o.TLSCAFile, o.TLSCertFile, o.TLSKeyFile
		if t.tlsDir != "" {
			if caFile == "" {
				caFile = filepath.Join(t.tlsDir, "ca-cert.pem")
			}
			cf, kf := filepath.Join(t.tlsDir, "client-cert.pem"), filepath.Join(t.tlsDir, "client-key.pem")
			if certFile == "" && exists(cf) && exists(kf) {
				certFile, keyFile = cf, kf
			}
		}
		if caFile != "" {
			pem, err := os.ReadFile(caFile)
			if err != nil {
				return nil, fmt.Errorf("nbdclient: TLS CA file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("nbdclient: TLS CA file %s holds no PEM certificate", caFile)
			}
			cfg.RootCAs = pool
		}
		if certFile != "" {
			pair, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return nil, fmt.Errorf("nbdclient: TLS client certificate: %w", err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
	}
	switch {
	case o.TLSServerName != "":
		cfg.ServerName = o.TLSServerName
	case t.tlsHost != "":
		cfg.ServerName = t.tlsHost
	case cfg.ServerName != "":
	case t.host != "":
		cfg.ServerName = t.host
	case !cfg.InsecureSkipVerify:
		return nil, fmt.Errorf("nbdclient: %s: no name to verify the server's certificate against: add tls-hostname=NAME to the URL or set Options.TLSServerName", t.redacted)
	}
	// The protocol requires TLS 1.2 and advises against older versions.
	cfg.MinVersion = max(cfg.MinVersion, tls.VersionTLS12)
	return cfg, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
