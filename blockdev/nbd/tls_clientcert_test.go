package nbd

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev/internal/nbdproto"
)

// testCA is a certificate authority of the tests' PKI.
type testCA struct {
	cert *x509.Certificate
	key  crypto.Signer
}

var testSerial atomic.Int64

// newTestKey makes a key of the algorithm alg: rsa (2048 bits), ecdsa
// (P-256) or ed25519.
func newTestKey(t testing.TB, alg string) crypto.Signer {
	t.Helper()
	var k crypto.Signer
	var err error
	switch alg {
	case "rsa":
		k, err = rsa.GenerateKey(rand.Reader, 2048)
	case "ecdsa":
		k, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "ed25519":
		_, k, err = ed25519.GenerateKey(rand.Reader)
	default:
		t.Fatalf("key algorithm %q", alg)
	}
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newTestCA(t testing.TB, name, alg string) *testCA {
	t.Helper()
	key := newTestKey(t, alg)
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(testSerial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key}
}

// issue makes a certificate for key with the extended key usage eku,
// valid for the host names dns.
func (ca *testCA) issue(t testing.TB, cn string, key crypto.Signer, eku x509.ExtKeyUsage, dns ...string) []byte {
	t.Helper()
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(testSerial.Add(1)), Subject: pkix.Name{CommonName: cn},
		DNSNames: dns, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{eku}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// clientCreds writes a client's credentials to a new directory under dir
// in the names of libnbd's tls-certificates and qemu's tls-creds-x509
// (ca-cert.pem: the CAs the client trusts, client-cert.pem and
// client-key.pem; none of these two when certDER is nil).
func clientCreds(t testing.TB, dir, name string, cas []*testCA, certDER []byte, key crypto.Signer) string {
	t.Helper()
	d := filepath.Join(dir, name)
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	var caPEM []byte
	for _, ca := range cas {
		caPEM = append(caPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})...)
	}
	files := map[string][]byte{"ca-cert.pem": caPEM}
	if certDER != nil {
		kd, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		files["client-cert.pem"] = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certDER})
		files["client-key.pem"] = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd})
	}
	for f, b := range files {
		if err := os.WriteFile(filepath.Join(d, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// clientCertServer is a TLS server requiring client certificates of ca,
// with a certificate for localhost, and what it reports through
// OnConnError.
type clientCertServer struct {
	*testServer
	errs chan error // "remote: error"
}

func startClientCertServer(t *testing.T, ca *testCA, auth tls.ClientAuthType, verify func([][]byte, [][]*x509.Certificate) error) *clientCertServer {
	t.Helper()
	dir := t.TempDir()
	srvKey := newTestKey(t, "ecdsa")
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	cfg := &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{ca.issue(t, "localhost", srvKey, x509.ExtKeyUsageServerAuth, "localhost")}, PrivateKey: srvKey}},
		ClientCAs:    pool, ClientAuth: auth, MinVersion: tls.VersionTLS12, VerifyPeerCertificate: verify,
	}
	tv := newTestVolume(t, dir, 1<<20, "4096+8")
	s := &clientCertServer{errs: make(chan error, 64)}
	s.testServer = startServer(t, dir, []Export{{Name: "disk", Volume: tv.vol}}, Options{TLS: cfg, OnConnError: func(remote string, err error) {
		select {
		case s.errs <- fmt.Errorf("%s: %w", remote, err):
		default:
		}
	}})
	return s
}

// drain drops what OnConnError reported so far.
func (s *clientCertServer) drain() {
	for s.nextErr(0) != nil {
	}
}

// nextErr returns the next error reported through OnConnError, or nil
// after wait.
func (s *clientCertServer) nextErr(wait time.Duration) error {
	select {
	case err := <-s.errs:
		return err
	case <-time.After(wait):
		return nil
	}
}

// isUnknownCA reports whether err is a failed TLS handshake because the
// client's certificate does not chain to the server's CAs.
func isUnknownCA(err error) bool {
	var ve *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	return errors.Is(err, ErrTLSHandshake) && errors.As(err, &ve) && errors.As(err, &ua)
}

// startTLSList starts TLS with cfg on a new connection to sock and lists
// the exports through it, returning the first error.
func startTLSList(t *testing.T, sock string, cfg *tls.Config) error {
	t.Helper()
	rc := dialRaw(t, sock)
	rc.clientFlags(nbdproto.ClientFixedNewstyle)
	rc.option(nbdproto.OptStartTLS, nil)
	if _, typ, _ := rc.optReply(); typ != nbdproto.RepAck {
		t.Fatalf("STARTTLS: reply %#x", typ)
	}
	tc := tls.Client(rc.c, cfg)
	if err := tc.Handshake(); err != nil {
		return err
	}
	// In TLS 1.3 the client's handshake ends before the server has
	// checked its certificate: a refusal arrives as an alert on the
	// first read.
	if _, err := tc.Write(bytes.Join([][]byte{u64(nbdproto.MagicOpt), u32(nbdproto.OptList), u32(0)}, nil)); err != nil {
		return err
	}
	var h [20]byte
	for {
		if _, err := io.ReadFull(tc, h[:]); err != nil {
			return err
		}
		if _, err := io.CopyN(io.Discard, tc, int64(binary.BigEndian.Uint32(h[16:]))); err != nil {
			return err
		}
		if typ := binary.BigEndian.Uint32(h[12:]); typ != nbdproto.RepServer {
			if typ != nbdproto.RepAck {
				t.Fatalf("LIST: reply %#x", typ)
			}
			break
		}
	}
	// An orderly end, which the server does not report.
	if _, err := tc.Write(bytes.Join([][]byte{u64(nbdproto.MagicOpt), u32(nbdproto.OptAbort), u32(0)}, nil)); err != nil {
		return err
	}
	_, err := io.ReadFull(tc, h[:])
	return err
}

// TestTLSClientCertVerified: with ClientCAs, the server's certificate
// request names no CA (GnuTLS clients then send RSA certificates too:
// TestTLSClientCertGnuTLS), and the server still verifies client
// certificates against ClientCAs as crypto/tls would, reporting a
// refused one through OnConnError with its reason; the application's
// VerifyPeerCertificate gets the verified chains.
func TestTLSClientCertVerified(t *testing.T) {
	ca := newTestCA(t, "difctl test CA", "ecdsa")
	other := newTestCA(t, "another CA", "ecdsa")
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	type client struct {
		name string
		cert *tls.Certificate
	}
	mk := func(name string, by *testCA, alg string, eku x509.ExtKeyUsage) client {
		key := newTestKey(t, alg)
		return client{name, &tls.Certificate{Certificate: [][]byte{by.issue(t, name, key, eku)}, PrivateKey: key}}
	}
	rsaC, ecC := mk("rsa", ca, "rsa", x509.ExtKeyUsageClientAuth), mk("ecdsa", ca, "ecdsa", x509.ExtKeyUsageClientAuth)
	otherC := mk("other-ca", other, "ecdsa", x509.ExtKeyUsageClientAuth)
	serverOnly := mk("server-usage", ca, "ecdsa", x509.ExtKeyUsageServerAuth)
	none := client{"none", nil}
	for _, auth := range []tls.ClientAuthType{tls.RequireAndVerifyClientCert, tls.VerifyClientCertIfGiven} {
		var chains atomic.Int64
		srv := startClientCertServer(t, ca, auth, func(raw [][]byte, vc [][]*x509.Certificate) error {
			if len(raw) > 0 && (len(vc) == 0 || !vc[0][len(vc[0])-1].Equal(ca.cert)) {
				return errors.New("VerifyPeerCertificate: no chain to the CA")
			}
			chains.Add(int64(len(vc)))
			return nil
		})
		for _, tc := range []struct {
			c    client
			want func(error) bool // the error reported, nil: none
		}{
			{rsaC, nil}, {ecC, nil},
			{otherC, isUnknownCA},
			{serverOnly, func(err error) bool {
				var ie x509.CertificateInvalidError
				return errors.Is(err, ErrTLSHandshake) && errors.As(err, &ie) && ie.Reason == x509.IncompatibleUsage
			}},
			{none, func(err error) bool {
				return auth == tls.RequireAndVerifyClientCert && errors.Is(err, ErrTLSHandshake) && strings.Contains(err.Error(), "didn't provide a certificate")
			}},
		} {
			t.Run("auth="+auth.String()+"/cert="+tc.c.name, func(t *testing.T) {
				var askedCAs [][]byte
				cfg := &tls.Config{RootCAs: roots, ServerName: "localhost", GetClientCertificate: func(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
					askedCAs = cri.AcceptableCAs
					if tc.c.cert == nil {
						return &tls.Certificate{}, nil
					}
					return tc.c.cert, nil
				}}
				srv.drain()
				before := chains.Load()
				err := startTLSList(t, srv.sock, cfg)
				if len(askedCAs) != 0 {
					t.Errorf("the certificate request names %d CAs, want none", len(askedCAs))
				}
				ok := tc.want == nil || (tc.c.cert == nil && auth == tls.VerifyClientCertIfGiven)
				if ok {
					if err != nil {
						t.Fatalf("refused: %v (server: %v)", err, srv.nextErr(time.Second))
					}
					if tc.c.cert != nil && chains.Load() == before {
						t.Error("VerifyPeerCertificate got no verified chain")
					}
					return
				}
				if err == nil {
					t.Fatal("accepted")
				}
				if rerr := srv.nextErr(5 * time.Second); !tc.want(rerr) {
					t.Errorf("OnConnError reported %v", rerr)
				}
			})
		}
	}
}

// TestTLSClientCertGnuTLS: qemu-img and nbdinfo (both GnuTLS) connect
// with RSA, ECDSA and Ed25519 client certificates to a server that
// requires and verifies them, over TLS 1.3; a certificate of another CA
// is refused, and OnConnError says so. GnuTLS 3.7 sent no RSA
// certificate while the request named the CAs (serverTLS); nbdinfo
// reported "A TLS fatal alert has been received" and the server "client
// didn't provide a certificate".
func TestTLSClientCertGnuTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "difctl test CA", "ecdsa")
	other := newTestCA(t, "another CA", "ecdsa")
	srv := startClientCertServer(t, ca, tls.RequireAndVerifyClientCert, nil)
	creds := map[string]string{}
	for _, alg := range []string{"rsa", "ecdsa", "ed25519"} {
		key := newTestKey(t, alg)
		creds[alg] = clientCreds(t, dir, alg, []*testCA{ca}, ca.issue(t, "client "+alg, key, x509.ExtKeyUsageClientAuth), key)
	}
	// The client trusts both CAs (qemu checks its own certificate against
	// them before connecting), the server only the first.
	key := newTestKey(t, "rsa")
	creds["other-ca"] = clientCreds(t, dir, "other-ca", []*testCA{ca, other}, other.issue(t, "client of another CA", key, x509.ExtKeyUsageClientAuth), key)

	connect := map[string]func(creds string) (string, error){
		"nbdinfo": func(creds string) (string, error) {
			return runErr("nbdinfo", "--size", "nbds+unix:///disk?socket="+srv.sock+"&tls-certificates="+creds+"&tls-hostname=localhost")
		},
		"qemu-img": func(creds string) (string, error) {
			return runErr("qemu-img", "info", "--object", "tls-creds-x509,id=tls0,endpoint=client,dir="+creds,
				"--image-opts", "driver=nbd,path="+srv.sock+",export=disk,tls-creds=tls0,tls-hostname=localhost")
		},
	}
	for _, client := range []string{"nbdinfo", "qemu-img"} {
		for _, cert := range []string{"rsa", "ecdsa", "ed25519", "other-ca"} {
			t.Run("client="+client+"/cert="+cert, func(t *testing.T) {
				need(t, client)
				srv.drain()
				out, err := connect[client](creds[cert])
				if cert == "other-ca" {
					if err == nil {
						t.Fatalf("connected with the certificate of another CA:\n%s", out)
					}
					rerr := srv.nextErr(5 * time.Second)
					if !isUnknownCA(rerr) {
						t.Errorf("OnConnError reported %v, want a failed TLS handshake for an unknown authority", rerr)
					}
					// A unix-socket client is named by its user.
					if runtime.GOOS == "linux" && !strings.HasPrefix(fmt.Sprint(rerr), "uid:") {
						t.Errorf("OnConnError does not name the client by its uid: %v", rerr)
					}
					return
				}
				if err != nil {
					t.Fatalf("%v\n%s\nserver: %v", err, out, srv.nextErr(time.Second))
				}
				if !strings.Contains(out, "1048576") && !strings.Contains(out, "1 MiB") {
					t.Errorf("output does not give the export's size:\n%s", out)
				}
				if rerr := srv.nextErr(100 * time.Millisecond); errors.Is(rerr, ErrTLSHandshake) {
					t.Errorf("OnConnError reported %v", rerr)
				}
			})
		}
	}
}
