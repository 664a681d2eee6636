package etcd

import (
	"errors"
	"testing"
	"time"

	"github.com/difctl/difctl/internal/etcdtest"
)

// TestTLS serves the cluster's clients over mutual TLS: a store opens with
// the CA and a client certificate, and fails without the certificate.
func TestTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("short: TLS handshakes")
	}
	files := etcdtest.NewTLS(t)
	c := startClusterTLS(t, 1, 0, files.Server(true))
	url := c.URL(newPrefix(t))
	o := testOptions()
	o.CACert, o.Cert, o.Key = files.CA, files.ClientCert, files.ClientKey
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
	c.EnableAuth(t, etcdtest.User{Name: "difctl", Password: "s3cret", Prefixes: []string{"test/"}})
	url := c.URL(newPrefix(t))
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
	s, err := Open(c.URL("other/p"), Options{Username: "difctl", Password: "s3cret", LeaseTTL: 3 * time.Second})
	if err == nil {
		s.Close()
	}
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("Open outside the user's permissions = %v, want ErrAuth", err)
	}
}
