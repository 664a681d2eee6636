package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/difctl/difctl/internal/nbdtest"
	"github.com/difctl/difctl/internal/promtest"
)

// protectedImage writes a protected image of size bytes (format
// 4096+8) in dir.
func protectedImage(t *testing.T, dir, name string, size int) string {
	t.Helper()
	img := filepath.Join(dir, name)
	if err := os.WriteFile(img, bytes.Repeat([]byte{0x5a}, size), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"protect", "--format", "4096+8", img}, nil, &out, &errb); code != 0 {
		t.Fatalf("protect: %d %s", code, errb.String())
	}
	return img
}

// TestServeMetricsListen runs serve with --metrics-listen on loopback,
// sends NBD traffic (a write, a flush, reads, a read of a block corrupted
// behind the server, a client refused by the full export), scrapes
// /metrics over HTTP and checks the counters the traffic moved; the
// metrics listener is closed when serve ends.
func TestServeMetricsListen(t *testing.T) {
	dir := t.TempDir()
	img := protectedImage(t, dir, "a.img", 1<<20)
	sock := filepath.Join(dir, "srv.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready, mready := make(chan net.Addr, 1), make(chan net.Addr, 1)
	var stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- runServe(ctx, serveOptions{Images: []string{img}, Socket: sock, MaxConns: 1,
			Ready:          func(a net.Addr) { ready <- a },
			metricsOptions: metricsOptions{MetricsListen: "127.0.0.1:0", MetricsReady: func(a net.Addr) { mready <- a }},
		}, nil, &stderr)
	}()
	var url string
	for url == "" || ready != nil {
		select {
		case a := <-mready:
			url = "http://" + a.String() + "/metrics"
		case <-ready:
			ready = nil
		case err := <-done:
			t.Fatalf("serve: %v; %s", err, stderr.String())
		case <-time.After(30 * time.Second):
			t.Fatal("serve did not start")
		}
	}
	if !strings.Contains(stderr.String(), "difctl: metrics at "+url+"\n") {
		t.Errorf("stderr does not say where the metrics are:\n%s", stderr.String())
	}

	c, err := nbdtest.Dial("unix", sock, "a.img")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Write(8192, bytes.Repeat([]byte{1}, 8192)); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(0, 16384); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(img, os.O_WRONLY, 0) // corrupt block 100 (0x5a) behind the server
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0}, 100*4096+9)
	f.Close()
	if _, err := c.Read(100*4096, 4096); err == nil {
		t.Fatal("read of a corrupted block succeeded")
	}
	var oe *nbdtest.OptionError
	if _, err := nbdtest.Dial("unix", sock, "a.img"); !errors.As(err, &oe) || oe.Type != nbdtest.RepErrPolicy {
		t.Errorf("second client of a full export: %v, want NBD_REP_ERR_POLICY", err)
	}

	x := func(name string, value float64, labels ...string) promtest.Want {
		return promtest.Series(name, value, append([]string{"export", "a.img"}, labels...)...)
	}
	v := func(name string, value float64, labels ...string) promtest.Want {
		return promtest.Series(name, value, append([]string{"volume", "a.img"}, labels...)...)
	}
	fams := promtest.Require(t, url,
		x("difctl_nbd_requests_total", 1, "op", "write", "result", "ok"),
		x("difctl_nbd_requests_total", 1, "op", "flush", "result", "ok"),
		x("difctl_nbd_requests_total", 1, "op", "read", "result", "ok"),
		x("difctl_nbd_requests_total", 1, "op", "read", "result", "error"),
		x("difctl_nbd_request_duration_seconds", 2, "op", "read"),
		x("difctl_nbd_read_bytes_total", 16384),
		x("difctl_nbd_written_bytes_total", 8192),
		x("difctl_nbd_connections", 1),
		x("difctl_nbd_export_full_refusals_total", 1),
		v("difctl_verification_failures_total", 1, "kind", "guard"),
		v("difctl_verification_failures_total", 1, "kind", "sector-crc"),
		v("difctl_volume_failed_blocks_total", 1),
		v("difctl_volume_written_blocks_total", 2),
		v("difctl_volume_repairs_total", 0),
	)
	if n, err := fams.Value("difctl_store_synced_commit_duration_seconds", "volume", "a.img"); err != nil || n == 0 {
		t.Errorf("synced store commits timed: %v (%v), want some (the FLUSH)", n, err)
	}

	cancel()
	if err := <-done; err == nil {
		t.Error("serve ended without an error, want the failure of the corrupted read")
	}
	if _, err := http.Get(url); err == nil {
		t.Error("the metrics are still served after serve ended")
	}
}

// TestScrubMetricsListen runs scrub with --metrics-listen on loopback over
// an image with a corrupted block and scrapes /metrics as the scrub ends
// (just before the listener closes).
func TestScrubMetricsListen(t *testing.T) {
	dir := t.TempDir()
	const size = 1 << 20
	img := protectedImage(t, dir, "disk.img", size)
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"inject", "--lba", "7", img}, nil, &out, &errb); code != 0 {
		t.Fatalf("inject: %d %s", code, errb.String())
	}
	var fams promtest.Families
	var serr error
	o := scrubOptions{Image: img, metricsOptions: metricsOptions{MetricsListen: "127.0.0.1:0",
		MetricsDone: func(a net.Addr) { fams, serr = promtest.Scrape("http://" + a.String() + "/metrics") }}}
	o.Quiet = true
	out.Reset()
	errb.Reset()
	if err := runScrub(context.Background(), o, &out, &errb); !isIntegrity(err) {
		t.Fatalf("scrub: %v, want an integrity failure\n%s%s", err, out.String(), errb.String())
	}
	if serr != nil {
		t.Fatal(serr)
	}
	v := func(name string, value float64, labels ...string) promtest.Want {
		return promtest.Series(name, value, append([]string{"volume", "disk.img"}, labels...)...)
	}
	for _, bad := range fams.Check(
		v("difctl_scrub_checked_blocks_total", size/4096),
		v("difctl_scrub_checked_bytes_total", size),
		v("difctl_scrub_pass_done_bytes", size),
		v("difctl_scrub_pass_bytes", size),
		v("difctl_scrub_findings_total", 2),
		v("difctl_scrub_eta_seconds", 0),
		v("difctl_verification_failures_total", 1, "kind", "guard"),
		v("difctl_verification_failures_total", 1, "kind", "sector-crc"),
		v("difctl_volume_read_blocks_total", size/4096),
		v("difctl_volume_failed_blocks_total", 1),
	) {
		t.Error(bad)
	}
	if r, err := fams.Value("difctl_scrub_rate_bytes_per_second", "volume", "disk.img"); err != nil || r <= 0 {
		t.Errorf("scrub rate %v (%v), want above 0", r, err)
	}
}

// TestMetricsListenUsage: an address that is not HOST:PORT is a usage
// error (exit 16), before anything is opened.
func TestMetricsListenUsage(t *testing.T) {
	for _, cmd := range []string{"serve", "scrub"} {
		for _, addr := range []string{"9464", "localhost:http:1", "127.0.0.1:65536", "127.0.0.1:port"} {
			t.Run("cmd="+cmd+"/addr="+addr, func(t *testing.T) {
				var out, errb bytes.Buffer
				code := run(context.Background(), []string{cmd, "--metrics-listen", addr, filepath.Join(t.TempDir(), "none.img")}, nil, &out, &errb)
				if code != exitUsage || !strings.Contains(errb.String(), "--metrics-listen") {
					t.Errorf("exit %d, want %d; stderr:\n%s", code, exitUsage, errb.String())
				}
			})
		}
	}
}
