package etcd

import (
	"testing"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/difctl/difctl/internal/etcdtest"
)

// The tests run a real etcd cluster in this process (internal/etcdtest).
type (
	cluster = etcdtest.Cluster
	member  = etcdtest.Member
)

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

// startClusterOpts is startCluster with every option. Under -short (the
// -race leg of CI) the members skip fsync, and so do those of tests that
// ask: noFsync is for tests whose crashes are of client processes, which
// fsync does not change; the member failure tests keep it.
func startClusterOpts(t testing.TB, n int, quotaBytes int64, tls *transport.TLSInfo, noFsync bool) *cluster {
	t.Helper()
	return etcdtest.Start(t, n, etcdtest.Options{QuotaBytes: quotaBytes, TLS: tls, NoFsync: noFsync})
}

// adminClient is a plain client on the cluster, for what an operator or a
// test does beside the store.
func adminClient(t testing.TB, c *cluster) *clientv3.Client {
	t.Helper()
	return c.Client(t)
}
