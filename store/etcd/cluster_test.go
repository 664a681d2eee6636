package etcd

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// cluster is a real etcd cluster run in this process by embed: members on
// loopback ports picked here, data directories under t.TempDir().
type cluster struct {
	t       testing.TB
	mu      sync.Mutex
	members []*member
}

type member struct {
	name       string
	dir        string
	peer, cli  url.URL
	initial    string
	e          *embed.Etcd // nil while stopped
	quotaBytes int64
	tls        *transport.TLSInfo // client TLS, nil for plain http
	noFsync    bool
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

// startCluster starts n members and waits until they serve.
func startCluster(t testing.TB, n int, quotaBytes int64) *cluster {
	t.Helper()
	return startClusterTLS(t, n, quotaBytes, nil)
}

// startClusterTLS is startCluster with clients served over TLS.
func startClusterTLS(t testing.TB, n int, quotaBytes int64, tls *transport.TLSInfo) *cluster {
	t.Helper()
	return startClusterOpts(t, n, quotaBytes, tls, testing.Short())
}

// startClusterOpts is startCluster with every option; noFsync runs the
// members without fsync, for tests whose crashes are of client processes,
// which fsync does not change.
func startClusterOpts(t testing.TB, n int, quotaBytes int64, tls *transport.TLSInfo, noFsync bool) *cluster {
	t.Helper()
	scheme := "http"
	if tls != nil {
		scheme = "https"
	}
	ports := freePorts(t, 2*n)
	c := &cluster{t: t}
	var initial []string
	for i := range n {
		m := &member{
			name:       fmt.Sprintf("m%d", i),
			dir:        t.TempDir(),
			peer:       url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i])},
			cli:        url.URL{Scheme: scheme, Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])},
			quotaBytes: quotaBytes,
			tls:        tls,
			noFsync:    noFsync,
		}
		initial = append(initial, m.name+"="+m.peer.String())
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		m.initial = strings.Join(initial, ",")
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, m := range c.members {
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

func (m *member) config(state string) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cfg.ListenPeerUrls = []url.URL{m.peer}
	cfg.AdvertisePeerUrls = []url.URL{m.peer}
	cfg.ListenClientUrls = []url.URL{m.cli}
	cfg.AdvertiseClientUrls = []url.URL{m.cli}
	cfg.InitialCluster = m.initial
	cfg.InitialClusterToken = "difctl-test"
	cfg.ClusterState = state
	// etcd's default 100 ms heartbeats and 1 s election timeout: faster
	// ones make elections flap on this shared machine. The minimum lease
	// TTL is 1.5 s.
	cfg.TickMs = 100
	cfg.ElectionMs = 1000
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	// Under -short (the -race leg of CI) the members skip fsync, and so do
	// those of tests that ask (see startClusterOpts); the member failure
	// tests keep it.
	cfg.UnsafeNoFsync = m.noFsync
	cfg.BcryptCost = 4 // bcrypt.MinCost: password checks fast under -race
	if m.tls != nil {
		cfg.ClientTLSInfo = *m.tls
	}
	if m.quotaBytes > 0 {
		cfg.QuotaBackendBytes = m.quotaBytes
	}
	return cfg
}

func (m *member) start(state string) error {
	e, err := embed.StartEtcd(m.config(state))
	if err != nil {
		return fmt.Errorf("start %s: %v", m.name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		return fmt.Errorf("start %s: not ready after 30s", m.name)
	}
	m.e = e
	return nil
}

// stop stops a member; hard skips the graceful leadership hand-off.
func (m *member) stop(hard bool) {
	if m.e == nil {
		return
	}
	if hard {
		m.e.Server.HardStop()
	}
	m.e.Close()
	m.e = nil
}

func (c *cluster) stopAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.members {
		m.stop(false)
	}
}

// restart starts a stopped member again on its data directory.
func (c *cluster) restart(m *member) {
	c.t.Helper()
	if err := m.start("existing"); err != nil {
		c.t.Fatal(err)
	}
}

// hosts returns the client addresses for an etcd:// URL.
func (c *cluster) hosts() string {
	var h []string
	for _, m := range c.members {
		h = append(h, m.cli.Host)
	}
	return strings.Join(h, ",")
}

// url returns an etcd:// URL of prefix on the cluster.
func (c *cluster) url(prefix string) string { return "etcd://" + c.hosts() + "/" + prefix }

// leader returns the member that leads, waiting for an election.
func (c *cluster) leader() *member {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range c.members {
			if m.e != nil && m.e.Server.Leader() == m.e.Server.MemberID() {
				return m
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatal("no leader after 20s")
	return nil
}
