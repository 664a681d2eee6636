// Package etcdtest runs real etcd clusters in the test process
// (go.etcd.io/etcd/server/v3/embed), with TLS and authentication when a
// test asks, for the tests of store/etcd and of the commands that take
// etcd URLs. Only tests import it.
package etcdtest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Options configure Start. The zero value is a plain cluster with fsync.
type Options struct {
	// QuotaBytes is the members' --quota-backend-bytes; 0: etcd's default.
	QuotaBytes int64
	// TLS, if not nil, serves the clients over TLS (https).
	TLS *transport.TLSInfo
	// NoFsync runs the members without fsync (for tests whose crashes are
	// of client processes, which fsync does not change).
	NoFsync bool
}

// Cluster is a real etcd cluster run in this process: members on loopback
// ports picked by Start, data directories under t.TempDir().
type Cluster struct {
	t       testing.TB
	mu      sync.Mutex
	Members []*Member
}

// Member is one member of a Cluster.
type Member struct {
	Name         string
	Dir          string  // data directory
	Peer, Client url.URL // the peer and client URLs it listens on
	initial      string
	e            *embed.Etcd // nil while stopped
	o            Options
}

// freePorts reserves n loopback ports by listening and closing.
func freePorts(t testing.TB, n int) []int {
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// Start starts a cluster of n members, waits until they serve, and stops
// them when the test ends.
func Start(t testing.TB, n int, o Options) *Cluster {
	t.Helper()
	scheme := "http"
	if o.TLS != nil {
		scheme = "https"
	}
	ports := freePorts(t, 2*n)
	c := &Cluster{t: t}
	var initial []string
	for i := range n {
		m := &Member{
			Name:   fmt.Sprintf("m%d", i),
			Dir:    t.TempDir(),
			Peer:   url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i])},
			Client: url.URL{Scheme: scheme, Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])},
			o:      o,
		}
		initial = append(initial, m.Name+"="+m.Peer.String())
		c.Members = append(c.Members, m)
	}
	for _, m := range c.Members {
		m.initial = strings.Join(initial, ",")
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, m := range c.Members {
		wg.Go(func() { errs[i] = m.start("new") })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			c.stopAll()
			t.Fatal(err)
		}
	}
	t.Cleanup(c.stopAll)
	return c
}

func (m *Member) config(state string) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = m.Name
	cfg.Dir = m.Dir
	cfg.ListenPeerUrls = []url.URL{m.Peer}
	cfg.AdvertisePeerUrls = []url.URL{m.Peer}
	cfg.ListenClientUrls = []url.URL{m.Client}
	cfg.AdvertiseClientUrls = []url.URL{m.Client}
	cfg.InitialCluster = m.initial
	cfg.InitialClusterToken = "difctl-test"
	cfg.ClusterState = state
	// etcd's default 100 ms heartbeats and 1 s election timeout: faster
	// ones make elections flap on a shared machine. The minimum lease TTL
	// is 1.5 s.
	cfg.TickMs = 100
	cfg.ElectionMs = 1000
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.UnsafeNoFsync = m.o.NoFsync
	cfg.BcryptCost = 4 // bcrypt.MinCost: password checks fast under -race
	if m.o.TLS != nil {
		cfg.ClientTLSInfo = *m.o.TLS
	}
	if m.o.QuotaBytes > 0 {
		cfg.QuotaBackendBytes = m.o.QuotaBytes
	}
	return cfg
}

func (m *Member) start(state string) error {
	e, err := embed.StartEtcd(m.config(state))
	if err != nil {
		return fmt.Errorf("start %s: %v", m.Name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		return fmt.Errorf("start %s: not ready after 30s", m.Name)
	}
	m.e = e
	return nil
}

// Stop stops a member; hard skips the graceful leadership hand-off.
func (m *Member) Stop(hard bool) {
	if m.e == nil {
		return
	}
	if hard {
		m.e.Server.HardStop()
	}
	m.e.Close()
	m.e = nil
}

func (c *Cluster) stopAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.Members {
		m.Stop(false)
	}
}

// Restart starts a stopped member again on its data directory.
func (c *Cluster) Restart(m *Member) {
	c.t.Helper()
	if err := m.start("existing"); err != nil {
		c.t.Fatal(err)
	}
}

// Hosts returns the members' client addresses, for an etcd:// URL.
func (c *Cluster) Hosts() string {
	var h []string
	for _, m := range c.Members {
		h = append(h, m.Client.Host)
	}
	return strings.Join(h, ",")
}

// URL returns an etcd:// URL of prefix on the cluster.
func (c *Cluster) URL(prefix string) string { return "etcd://" + c.Hosts() + "/" + prefix }

// Leader returns the member that leads, waiting for an election.
func (c *Cluster) Leader() *Member {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range c.Members {
			if m.e != nil && m.e.Server.Leader() == m.e.Server.MemberID() {
				return m
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatal("no leader after 20s")
	return nil
}

// Client returns a plain client of a cluster without TLS, closed when the
// test ends, for what an operator does beside difctl. Once EnableAuth has
// run it may do nothing more.
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, "http://"+m.Client.Host)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// User is a user EnableAuth creates, with read-write access to the keys
// under each of Prefixes and nothing else.
type User struct {
	Name, Password string
	Prefixes       []string
}

// EnableAuth creates root (password "rootpw") and users on a cluster
// without TLS, each with a role of its own, and turns etcd's
// authentication on.
func (c *Cluster) EnableAuth(t testing.TB, users ...User) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin := c.Client(t)
	steps := []func() error{
		func() error { _, err := admin.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
	}
	for _, u := range users {
		role := "role-" + u.Name
		steps = append(steps,
			func() error { _, err := admin.UserAdd(ctx, u.Name, u.Password); return err },
			func() error { _, err := admin.RoleAdd(ctx, role); return err },
			func() error { _, err := admin.UserGrantRole(ctx, u.Name, role); return err })
		for _, p := range u.Prefixes {
			steps = append(steps, func() error {
				_, err := admin.RoleGrantPermission(ctx, role, p, clientv3.GetPrefixRangeEnd(p), clientv3.PermissionType(clientv3.PermReadWrite))
				return err
			})
		}
	}
	steps = append(steps, func() error { _, err := admin.AuthEnable(ctx); return err })
	for _, step := range steps {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
}

// TLSFiles are the PEM files NewTLS writes.
type TLSFiles struct {
	CA                    string // the CA's certificate
	ServerCert, ServerKey string // for 127.0.0.1
	ClientCert, ClientKey string
}

// NewTLS writes a CA, a server certificate for 127.0.0.1 and a client
// certificate, all signed by the CA and valid for an hour, into a
// temporary directory.
func NewTLS(t testing.TB) TLSFiles {
	t.Helper()
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
	p := func(name string) string { return filepath.Join(dir, name) }
	return TLSFiles{
		CA:         p("ca.pem"),
		ServerCert: p("server.pem"), ServerKey: p("server-key.pem"),
		ClientCert: p("client.pem"), ClientKey: p("client-key.pem"),
	}
}

// Server returns the servers' TLS settings: their certificate, and with
// clientCerts a client certificate signed by the CA required of every
// client.
func (f TLSFiles) Server(clientCerts bool) *transport.TLSInfo {
	return &transport.TLSInfo{CertFile: f.ServerCert, KeyFile: f.ServerKey, TrustedCAFile: f.CA, ClientCertAuth: clientCerts}
}

// writeCert writes a certificate signed by parent (itself when nil) and its
// key into dir as name.pem and name-key.pem.
func writeCert(t testing.TB, dir, name string, tmpl *x509.Certificate, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
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
	for file, b := range map[string][]byte{
		name + ".pem":     pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		name + "-key.pem": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
	} {
		if err := os.WriteFile(filepath.Join(dir, file), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}
