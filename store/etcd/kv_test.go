package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/difctl/difctl/store"
	"github.com/difctl/difctl/store/storetest"
)

// testOptions are short timeouts for tests on loopback.
func testOptions() Options {
	return Options{LeaseTTL: 3 * time.Second, OpTimeout: 5 * time.Second, DialTimeout: 5 * time.Second}
}

var prefixSeq atomic.Int64

func newPrefix(t testing.TB) string {
	name := strings.NewReplacer("/", "_", "=", "-").Replace(t.Name())
	return fmt.Sprintf("test/%s/%d", name, prefixSeq.Add(1))
}

func openT(t testing.TB, url string, o Options) *kv {
	t.Helper()
	s, err := Open(url, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s.(*kv)
}

// crash abandons k as a killed process would, revokes its lease (as its
// expiry would, without the wait) and opens the store again.
func crash(t testing.TB, c *cluster, k *kv) *kv {
	t.Helper()
	lease := k.sess.Lease()
	k.abandon()
	admin := adminClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := admin.Revoke(ctx, lease); err != nil {
		t.Fatalf("revoke the crashed writer's lease: %v", err)
	}
	return openT(t, k.t.String(), k.o)
}

func members() int {
	if testing.Short() {
		return 1
	}
	return 3
}

func TestConformance(t *testing.T) {
	c := startCluster(t, members(), 0)
	var mu sync.Mutex
	// The default lease (10 s) rather than testOptions' 3 s: no conformance
	// test waits for a lease to expire (a crash revokes it), and at a load
	// average of 4 a 3 s lease once lapsed during test=Concurrent (the
	// writer was fenced: "the lease was lost").
	o := testOptions()
	o.LeaseTTL = DefaultLeaseTTL
	storetest.RunConformance(t, storetest.Backend{
		Open: func(t *testing.T) store.KV { return openT(t, c.URL(newPrefix(t)), o) },
		Crash: func(t *testing.T, s store.KV) store.KV {
			mu.Lock()
			defer mu.Unlock()
			return crash(t, c, s.(*kv))
		},
	})
}

// TestConformanceSmallTxn runs the suite with transactions of 8 operations
// and 1.1 MiB requests, so that most of its batches and loads take the
// staged path of several transactions.
func TestConformanceSmallTxn(t *testing.T) {
	if testing.Short() {
		t.Skip("short: the default-size suite runs")
	}
	c := startClusterOpts(t, 1, 0, nil, true)
	o := testOptions()
	o.MaxTxnOps, o.MaxRequestBytes, o.InFlight = 8, 1<<20+100<<10, 3
	storetest.RunConformance(t, storetest.Backend{
		Open:  func(t *testing.T) store.KV { return openT(t, c.URL(newPrefix(t)), o) },
		Crash: func(t *testing.T, s store.KV) store.KV { return crash(t, c, s.(*kv)) },
	})
}

func TestURL(t *testing.T) {
	for _, tc := range []struct {
		url, want, err string
	}{
		{"etcd://a:1,b:2/p", "etcd://a:1,b:2/p", ""},
		{"etcd://a/x/y/", "etcd://a:2379/x/y", ""},
		{"etcd://[::1]/p", "etcd://[::1]:2379/p", ""},
		{"etcd://user:hunter2@a/p", "", "credentials in the URL are refused"},
		{"etcd://a/", "", "names no key prefix"},
		{"etcd://a,,b/p", "", "empty host"},
		{"etcd://a/p?user=x", "", "no query"},
		{"etc://a/p", "", "must start with etcd://"},
	} {
		t.Run("url="+tc.url, func(t *testing.T) {
			tg, err := parseURL(tc.url)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, store.ErrInvalid) {
					t.Fatalf("parseURL = %v, want ErrInvalid with %q", err, tc.err)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Fatalf("error shows the password: %v", err)
				}
				return
			}
			if err != nil || tg.String() != tc.want {
				t.Fatalf("parseURL = %v, %v; want %s", tg, err, tc.want)
			}
		})
	}
	// store.Open knows the scheme through the registration hook.
	_, err := store.Open("etcd://user:hunter2@127.0.0.1:1/p")
	if !errors.Is(err, store.ErrInvalid) || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("store.Open(etcd URL with credentials) = %v", err)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"etcd://user:hunter2@a:1,b/p": "etcd://***@a:1,b/p",
		"etcd://a/p@x":                "etcd://a/p@x",
		"pebble:/a@b":                 "pebble:/a@b",
		"etcd://u@a":                  "etcd://***@a",
	} {
		if got := store.RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
