package etcd

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// writeCert writes a certificate signed by parent (itself when nil) and its
// key into dir as name.pem and name-key.pem.
func writeCert(t *testing.T, dir, name string, tmpl *x509.Certificate, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, name+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(filepath.Join(dir, name+"-key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	return cert, key
}

// TestTLS serves the cluster's clients over mutual TLS: a store opens with
// the CA and a client certificate, and fails without the certificate.
func TestTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("short: TLS handshakes")
	}
	dir := t.TempDir()
	now := time.Now()
	ca, caKey := writeCert(t, dir, "ca", &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "difctl test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}, nil, nil)
	writeCert(t, dir, "server", &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "etcd"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca, caKey)
	writeCert(t, dir, "client", &x509.Certificate{
		SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "difctl"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, caKey)
	c := startClusterTLS(t, 1, 0, &transport.TLSInfo{
		CertFile: filepath.Join(dir, "server.pem"), KeyFile: filepath.Join(dir, "server-key.pem"),
		TrustedCAFile: filepath.Join(dir, "ca.pem"), ClientCertAuth: true,
	})
	url := c.url(newPrefix(t))
	o := testOptions()
	o.CACert, o.Cert, o.Key = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	k := openT(t, url, o)
	b := k.NewBatch()
	b.Set([]byte("k"), []byte("over TLS"))
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	if v, err := k.Get([]byte("k")); err != nil || string(v) != "over TLS" {
		t.Fatalf("Get over TLS = %q, %v", v, err)
	}
	k.Close()
	o.Cert, o.Key = "", ""
	o.DialTimeout, o.OpTimeout = time.Second, time.Second
	if s, err := Open(url, o); err == nil {
		s.Close()
		t.Fatal("Open without a client certificate succeeded against a server that requires one")
	}
}

// TestAuth enables etcd's authentication: a store opens with the right
// user and password, and fails with ErrAuth with a wrong one or none.
func TestAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("short: password hashing")
	}
	c := startCluster(t, 1, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin := adminClient(t, c)
	for _, step := range []func() error{
		func() error { _, err := admin.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.UserAdd(ctx, "difctl", "s3cret"); return err },
		func() error { _, err := admin.RoleAdd(ctx, "volumes"); return err },
		func() error {
			_, err := admin.RoleGrantPermission(ctx, "volumes", "test/", clientv3.GetPrefixRangeEnd("test/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := admin.UserGrantRole(ctx, "difctl", "volumes"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	url := c.url(newPrefix(t))
	o := testOptions()
	o.Username, o.Password = "difctl", "s3cret"
	k := openT(t, url, o)
	b := k.NewBatch()
	b.Set([]byte("k"), []byte("v"))
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	k.Close()
	for _, tc := range []struct{ name, user, pw string }{{"wrong-password", "difctl", "nope"}, {"none", "", ""}} {
		t.Run("creds="+tc.name, func(t *testing.T) {
			o := testOptions()
			o.Username, o.Password = tc.user, tc.pw
			s, err := Open(url, o)
			if err == nil {
				s.Close()
			}
			if !errors.Is(err, ErrAuth) {
				t.Fatalf("Open = %v, want ErrAuth", err)
			}
		})
	}
	// The role covers test/ only: another prefix is refused.
	s, err := Open(c.url("other/p"), Options{Username: "difctl", Password: "s3cret", LeaseTTL: 3 * time.Second})
	if err == nil {
		s.Close()
	}
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("Open outside the user's permissions = %v, want ErrAuth", err)
	}
}
