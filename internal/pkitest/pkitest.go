// Package pkitest makes a throwaway public key infrastructure for the
// tests of TLS: a CA, a server certificate for localhost and a client
// certificate, written as PEM files in the names qemu's tls-creds-x509,
// libnbd's and nbdkit's tls-certificates directory expect.
package pkitest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKI is a test CA and the certificates it signed, also in files in Dir:
// ca-cert.pem, server-cert.pem, server-key.pem, client-cert.pem and
// client-key.pem.
type PKI struct {
	Dir            string
	CAPool         *x509.CertPool
	Server, Client tls.Certificate
}

// New makes a PKI with its files in dir (valid for a day; ECDSA P-256).
func New(t testing.TB, dir string) *PKI {
	t.Helper()
	write := func(name, typ string, der []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	now := time.Now()
	caKey := newKey()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "difctl test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	write("ca-cert.pem", "CERTIFICATE", caDER)
	p := &PKI{Dir: dir, CAPool: x509.NewCertPool()}
	p.CAPool.AddCert(ca)
	leaf := func(name, cn string, serial int64, usage x509.ExtKeyUsage) tls.Certificate {
		key := newKey()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			DNSNames: []string{"localhost"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kd, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		write(name+"-cert.pem", "CERTIFICATE", der)
		write(name+"-key.pem", "PRIVATE KEY", kd)
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	p.Server = leaf("server", "localhost", 2, x509.ExtKeyUsageServerAuth)
	p.Client = leaf("client", "client", 3, x509.ExtKeyUsageClientAuth)
	return p
}

// ServerConfig is a server's TLS configuration that requires and
// verifies client certificates of the CA.
func (p *PKI) ServerConfig() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{p.Server}, ClientCAs: p.CAPool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
}
