package nbd

import (
	"crypto/fips140"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"time"
)

// ErrTLSHandshake matches the error reported (Options.OnConnError) for a
// client whose TLS handshake failed. The error wraps the TLS error too: a
// *tls.CertificateVerificationError for a client certificate that does not
// verify (its Err says why, e.g. an x509.UnknownAuthorityError), a
// tls.AlertError for an alert the client sent, or the message of
// crypto/tls ("tls: client didn't provide a certificate", ...).
var ErrTLSHandshake = errors.New("nbd: TLS handshake failed")

// serverTLS returns the configuration the server runs TLS with: cfg, or,
// when cfg has ClientCAs, a copy that does not name the CAs in its
// certificate request and verifies client certificates against them
// itself, as crypto/tls would (the chain to ClientCAs, the client-auth
// extended key usage, cfg.Time), before cfg's own VerifyPeerCertificate.
// GetConfigForClient's configurations get the same treatment. In FIPS
// 140-3 mode cfg is used as it is.
//
// The reason is GnuTLS (qemu, libnbd, nbd-client). Its TLS 1.3 client
// chooses a certificate issued by one of the CAs a request names, whose
// public-key type is among those of the request's signature_algorithms,
// taking rsa_pss_rsae_* for RSA-PSS keys (GnuTLS 3.7.9). crypto/tls lists
// only rsa_pss_rsae_* for RSA there (TLS 1.3 allows no PKCS#1 v1.5
// handshake signature), so a GnuTLS client with an RSA certificate (an
// rsaEncryption key, what openssl and certtool make) sent no certificate,
// and the handshake failed with "client didn't provide a certificate" on
// this side and a fatal alert on the client's; ECDSA and Ed25519
// certificates, and TLS 1.2, worked. Without certificate_authorities, a
// GnuTLS client holding one certificate sends it whatever its key, and
// signs with RSA-PSS as TLS 1.3 requires. The CAs are only a hint to
// clients with several certificates, which NBD clients do not hold.
func serverTLS(cfg *tls.Config) *tls.Config {
	if cfg == nil || fips140.Enabled() {
		return cfg
	}
	c := verifyClientCAs(cfg)
	if get := cfg.GetConfigForClient; get != nil {
		if c == cfg {
			c = cfg.Clone()
		}
		c.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			cc, err := get(h)
			if cc == nil || err != nil {
				return cc, err
			}
			return verifyClientCAs(cc), nil
		}
	}
	return c
}

// verifyClientCAs returns cfg, or a copy without ClientCAs that verifies
// client certificates against them in VerifyPeerCertificate (serverTLS).
func verifyClientCAs(cfg *tls.Config) *tls.Config {
	if cfg.ClientCAs == nil || cfg.ClientAuth == tls.NoClientCert {
		return cfg
	}
	c := cfg.Clone()
	roots := c.ClientCAs
	c.ClientCAs = nil
	// crypto/tls checks a resumed session's client certificate for
	// verified chains only under the verifying modes, which c no longer
	// uses: every connection makes a full handshake, verified here.
	c.SessionTicketsDisabled = true
	switch c.ClientAuth {
	case tls.VerifyClientCertIfGiven:
		c.ClientAuth = tls.RequestClientCert
	case tls.RequireAndVerifyClientCert:
		c.ClientAuth = tls.RequireAnyClientCert
	default:
		// Certificates requested, not verified: the CAs were only a hint.
		return c
	}
	now := c.Time
	if now == nil {
		now = time.Now
	}
	verify := func(certs []*x509.Certificate) ([][]*x509.Certificate, error) {
		opts := x509.VerifyOptions{Roots: roots, CurrentTime: now(), Intermediates: x509.NewCertPool(),
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		for _, ic := range certs[1:] {
			opts.Intermediates.AddCert(ic)
		}
		chains, err := certs[0].Verify(opts)
		if err != nil {
			return nil, &tls.CertificateVerificationError{UnverifiedCertificates: certs, Err: err}
		}
		return chains, nil
	}
	next := c.VerifyPeerCertificate
	c.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
		var chains [][]*x509.Certificate
		if len(raw) > 0 {
			certs := make([]*x509.Certificate, len(raw))
			for i, der := range raw {
				var err error
				// crypto/tls parsed them already: this cannot fail.
				if certs[i], err = x509.ParseCertificate(der); err != nil {
					return err
				}
			}
			var err error
			if chains, err = verify(certs); err != nil {
				return err
			}
		}
		if next != nil {
			return next(raw, chains)
		}
		return nil
	}
	if vc := c.VerifyConnection; vc != nil {
		// Its ConnectionState gets the chains crypto/tls would have put
		// there (verified again: nothing else carries them over).
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) > 0 && cs.VerifiedChains == nil {
				var err error
				if cs.VerifiedChains, err = verify(cs.PeerCertificates); err != nil {
					return err
				}
			}
			return vc(cs)
		}
	}
	return c
}
