package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/nbd"
	"github.com/difctl/difctl/blockdev/scrub"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/internal/nbdtest"
	"github.com/difctl/difctl/internal/promtest"
	"github.com/difctl/difctl/store"
)

const bs = 4096 // the test volumes' block size (format 4096+8)

// openVolume creates a protected volume of size bytes on a memory
// device, its store's commits counted into reg as volume name. Writing to
// the device corrupts blocks behind the volume's back.
func openVolume(t *testing.T, size int64, reg *Registry, name string) (*blockdev.Volume, *device.Mem) {
	t.Helper()
	dev, err := device.NewMem(size, 512)
	if err != nil {
		t.Fatal(err)
	}
	kv := store.ObserveCommits(store.NewMem(), reg.StoreCommits(name))
	vol, err := blockdev.Create(context.Background(), dev, kv, blockdev.CreateOptions{Format: dif.MustFormat("4096+8")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vol.Close() })
	return vol, dev
}

// listen serves reg on loopback until the test ends and returns the URL
// of its metrics.
func listen(t *testing.T, reg *Registry) string {
	t.Helper()
	srv, err := reg.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return "http://" + srv.Addr().String() + "/metrics"
}

// TestNBDMetrics serves a volume with the registry's hooks, sends traffic
// whose counts are known (writes, reads, a read of a corrupted block, a
// request out of range, a client refused by a full export, one refused by
// the handshake limits, one that breaks the protocol), scrapes /metrics
// over HTTP and checks what moved.
func TestNBDMetrics(t *testing.T) {
	dir := t.TempDir()
	reg := New()
	vol, dev := openVolume(t, 1<<20, reg, "disk")
	if err := reg.Volume("disk", vol); err != nil {
		t.Fatal(err)
	}
	if err := reg.Volume("disk", vol); err == nil {
		t.Error("a volume registered twice")
	}
	opts := nbd.Options{MaxConnections: 1, MaxHandshakes: 1, HandshakeTimeout: time.Minute}
	var failures atomic.Int32
	opts.OnFailure = func(nbd.Failure) { failures.Add(1) } // kept by NBD
	reg.NBD(&opts, "disk")
	sock := filepath.Join(dir, "nbd.sock")
	stop, err := nbdtest.Start([]nbd.Export{{Name: "disk", Volume: vol}}, opts, "unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	url := listen(t, reg)

	// Before any traffic every series of the export is there, at zero.
	fams := promtest.Require(t, url,
		promtest.Series("difctl_nbd_requests_total", 0, "export", "disk", "op", "write_zeroes", "result", "ok"),
		promtest.Series("difctl_nbd_connections", 0, "export", "disk"),
		promtest.Series("difctl_verification_failures_total", 0, "volume", "disk", "kind", "keyed-tag"),
		promtest.Series("difctl_volume_repairs_total", 0, "volume", "disk"),
		promtest.Series("difctl_nbd_connection_errors_total", 0, "reason", "evicted"),
	)
	if fams["go_goroutines"] == nil || fams["process_resident_memory_bytes"] == nil {
		t.Error("no Go runtime or process metrics")
	}

	c, err := nbdtest.Dial("unix", sock, "disk")
	if err != nil {
		t.Fatal(err)
	}
	promtest.Require(t, url, promtest.Series("difctl_nbd_connections", 1, "export", "disk"))
	// The export is full: a second client is refused (NBD_REP_ERR_POLICY).
	var oe *nbdtest.OptionError
	if c2, err := nbdtest.Dial("unix", sock, "disk"); !errors.As(err, &oe) || oe.Type != nbdtest.RepErrPolicy {
		t.Fatalf("second client of a full export: %v, want NBD_REP_ERR_POLICY", err)
	} else if c2 != nil {
		c2.Close()
	}
	// That client hung up (an error of the handshake: other), freeing
	// the only handshake slot.
	promtest.Require(t, url, promtest.Series("difctl_nbd_connection_errors_total", 1, "reason", "other"))
	// A client negotiating holds that slot: the next is refused at once
	// (nbd.ErrRefused), before it gets the greeting.
	silent, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nbdtest.Dial("unix", sock, "disk"); err == nil {
		t.Fatal("a client got past the handshake limit")
	}
	promtest.Require(t, url, promtest.Series("difctl_nbd_connection_errors_total", 1, "reason", "refused"))
	silent.Close()
	promtest.Require(t, url, promtest.Series("difctl_nbd_connection_errors_total", 2, "reason", "other"))
	// A client breaking the protocol: unknown client flags.
	bad, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if _, err := io.ReadFull(bad, make([]byte, 18)); err != nil { // the greeting
		t.Fatal(err)
	}
	bad.Write([]byte{0x80, 0, 0, 0})

	data := make([]byte, 64<<10)
	for i := range data {
		data[i] = byte(i / bs)
	}
	if err := c.Write(0, data); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Read(0, len(data)); err != nil || string(got) != string(data) {
		t.Fatalf("read back: %v", err)
	}
	dev.WriteAt([]byte{0xff}, 5*bs+9) // block 5 holds 5s
	var re *nbdtest.ReplyError
	if _, err := c.Read(5*bs, bs); !errors.As(err, &re) || re.Code != nbdtest.EIO {
		t.Fatalf("read of a corrupted block: %v, want EIO", err)
	}
	if _, err := c.Read(1<<20, bs); !errors.As(err, &re) {
		t.Fatalf("read beyond the export: %v, want an error", err)
	}
	c.Close()

	disk := func(labels ...string) []string { return append([]string{"export", "disk"}, labels...) }
	vdisk := func(labels ...string) []string { return append([]string{"volume", "disk"}, labels...) }
	fams = promtest.Require(t, url,
		promtest.Series("difctl_nbd_requests_total", 1, disk("op", "write", "result", "ok")...),
		promtest.Series("difctl_nbd_requests_total", 1, disk("op", "flush", "result", "ok")...),
		promtest.Series("difctl_nbd_requests_total", 1, disk("op", "read", "result", "ok")...),
		promtest.Series("difctl_nbd_requests_total", 1, disk("op", "read", "result", "error")...),
		promtest.Series("difctl_nbd_requests_total", 1, disk("op", "read", "result", "refused")...),
		promtest.Series("difctl_nbd_requests_total", 0, disk("op", "trim", "result", "ok")...),
		promtest.Series("difctl_nbd_request_duration_seconds", 3, disk("op", "read")...),
		promtest.Series("difctl_nbd_request_duration_seconds", 1, disk("op", "write")...),
		promtest.Series("difctl_nbd_read_bytes_total", 64<<10, disk()...),
		promtest.Series("difctl_nbd_written_bytes_total", 64<<10, disk()...),
		promtest.Series("difctl_nbd_connections", 0, disk()...),
		promtest.Series("difctl_nbd_connections_total", 1, disk()...),
		promtest.Series("difctl_nbd_export_full_refusals_total", 1, disk()...),
		promtest.Series("difctl_nbd_connection_errors_total", 1, "reason", "refused"),
		promtest.Series("difctl_nbd_connection_errors_total", 1, "reason", "protocol"),
		promtest.Series("difctl_nbd_connection_errors_total", 2, "reason", "other"),
		promtest.Series("difctl_nbd_connection_errors_total", 0, "reason", "evicted"),
		promtest.Series("difctl_verification_failures_total", 1, vdisk("kind", "guard")...),
		promtest.Series("difctl_verification_failures_total", 1, vdisk("kind", "sector-crc")...),
		promtest.Series("difctl_verification_failures_total", 0, vdisk("kind", "ref-tag")...),
		promtest.Series("difctl_volume_failed_blocks_total", 1, vdisk()...),
		promtest.Series("difctl_volume_written_blocks_total", 16, vdisk()...),
		promtest.Series("difctl_volume_repairs_total", 0, vdisk()...),
	)
	if n := failures.Load(); n != 1 {
		t.Errorf("the OnFailure set before NBD was called %d times, want 1", n)
	}
	// The volume's counters are its Stats at the scrape (the server is
	// idle now).
	st := vol.Stats()
	for name, want := range map[string]int64{
		"difctl_volume_read_blocks_total": st.ReadBlocks, "difctl_volume_rereads_total": st.Rereads,
		"difctl_volume_transient_blocks_total": st.Transient, "difctl_volume_syncs_total": st.Syncs,
		"difctl_volume_flushes_total":            st.Flushes,
		"difctl_volume_tuple_cache_hits_total":   st.TupleCacheHits,
		"difctl_volume_tuple_cache_misses_total": st.TupleCacheMisses,
	} {
		if got, err := fams.Value(name, vdisk()...); err != nil || got != float64(want) {
			t.Errorf("%s = %v (%v), want %d", name, got, err, want)
		}
	}
	if st.Rereads == 0 || st.TupleCacheHits+st.TupleCacheMisses == 0 || st.Syncs == 0 {
		t.Errorf("the traffic moved too little to test the volume's counters: %+v", st)
	}
	// The FLUSH and the finding's record committed to the store, synced.
	synced, _ := fams.Value("difctl_store_commits_total", vdisk("sync", "true")...)
	timed, _ := fams.Value("difctl_store_synced_commit_duration_seconds", vdisk()...)
	if synced < 2 || timed != synced {
		t.Errorf("%v synced commits, %v timed, want at least 2, all timed", synced, timed)
	}
	if got, err := fams.Value("difctl_store_commit_failures_total", vdisk()...); err != nil || got != 0 {
		t.Errorf("commit failures %v (%v), want 0", got, err)
	}
}

// TestScrubMetrics scrubs a volume with a corrupted block, rate-limited so
// that it reports progress several times, scrapes /metrics during the scrub
// and after it, and checks the progress and the findings.
func TestScrubMetrics(t *testing.T) {
	reg := New()
	const size = 2 << 20
	vol, dev := openVolume(t, size, reg, "disk")
	if _, err := vol.WriteAt(make([]byte, size), 0); err != nil {
		t.Fatal(err)
	}
	if err := vol.Sync(); err != nil {
		t.Fatal(err)
	}
	dev.WriteAt([]byte{0x10}, 100*bs) // zeros
	url := listen(t, reg)
	var mid []string // mismatches seen in scrapes during the scrub
	scrapes := 0
	o := scrub.Options{
		Workers: 1, RunBlocks: 16, Limiter: scrub.NewRateLimiter(8 << 20), ProgressInterval: 20 * time.Millisecond,
		Progress: func(p scrub.Progress) {
			if p.Done == 0 || p.Done == p.Total {
				return
			}
			scrapes++
			fams, err := promtest.Scrape(url)
			if err != nil {
				mid = append(mid, err.Error())
				return
			}
			for name, want := range map[string]float64{
				"difctl_scrub_pass_done_bytes": float64(p.Done), "difctl_scrub_pass_bytes": size,
				"difctl_scrub_checked_blocks_total": float64(p.Blocks), "difctl_scrub_rate_bytes_per_second": p.Rate,
			} {
				if got, err := fams.Value(name, "volume", "disk"); err != nil || got != want {
					mid = append(mid, fmt.Sprintf("%s = %v (%v), want %v", name, got, err, want))
				}
			}
		},
	}
	reg.Scrub(&o, "disk")
	promtest.Require(t, url, promtest.Series("difctl_scrub_checked_blocks_total", 0, "volume", "disk"),
		promtest.Series("difctl_scrub_eta_seconds", -1, "volume", "disk"))
	rep, err := scrub.Run(context.Background(), vol, o)
	if err != nil {
		t.Fatal(err)
	}
	if scrapes == 0 {
		t.Error("no scrape during the scrub")
	}
	for _, m := range mid {
		t.Error("during the scrub: " + m)
	}
	v := []string{"volume", "disk"}
	fams := promtest.Require(t, url,
		promtest.Series("difctl_scrub_checked_blocks_total", size/bs, v...),
		promtest.Series("difctl_scrub_checked_bytes_total", size, v...),
		promtest.Series("difctl_scrub_pass_done_bytes", size, v...),
		promtest.Series("difctl_scrub_pass_bytes", size, v...),
		promtest.Series("difctl_scrub_findings_total", float64(rep.FindingsTotal), v...),
		promtest.Series("difctl_scrub_eta_seconds", 0, v...),
		promtest.Series("difctl_scrub_paused", 0, v...),
		promtest.Series("difctl_verification_failures_total", 1, append(v, "kind", "guard")...),
		promtest.Series("difctl_verification_failures_total", 1, append(v, "kind", "sector-crc")...),
		promtest.Series("difctl_verification_failures_total", 0, append(v, "kind", "torn")...),
	)
	if rep.FindingsTotal != 2 {
		t.Errorf("%d findings, want 2 (guard and sector checksum of one block)", rep.FindingsTotal)
	}
	if r, _ := fams.Value("difctl_scrub_rate_bytes_per_second", v...); r <= 0 || r > 8<<20 {
		t.Errorf("rate %v bytes/s, want above 0 and at most the limit, 8 MiB/s", r)
	}
}

// TestRequestHookAllocs: counting a request allocates nothing.
func TestRequestHookAllocs(t *testing.T) {
	reg := New()
	var o nbd.Options
	reg.NBD(&o, "disk")
	for _, e := range []nbd.RequestEvent{
		{Export: "disk", Op: nbd.OpRead, Length: 4096, Duration: time.Millisecond},
		{Export: "disk", Op: nbd.OpWrite, Length: 4096, Duration: time.Millisecond, Err: nbd.ErrBadRequest},
		{Export: "disk", Op: nbd.OpFlush, Duration: time.Millisecond, Err: device.ErrClosed},
	} {
		if n := testing.AllocsPerRun(100, func() { o.OnRequest(e) }); n != 0 {
			t.Errorf("%v: %v allocations per request, want 0", e.Op, n)
		}
	}
}

// TestRepairMetrics: a read that repairs a block from a mirror leg moves
// the repairs counter; one that finds no verifying copy moves the
// unrepairable one.
func TestRepairMetrics(t *testing.T) {
	reg := New()
	vol, dev := openVolume(t, 64<<10, reg, "disk")
	leg, err := device.NewMem(64<<10, 512)
	if err != nil {
		t.Fatal(err)
	}
	if err := vol.AddMirror(blockdev.Mirror{Name: "leg", Dev: leg}); err != nil {
		t.Fatal(err)
	}
	if _, err := vol.Resync(context.Background(), blockdev.ResyncOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := reg.Volume("disk", vol); err != nil {
		t.Fatal(err)
	}
	url := listen(t, reg)
	promtest.Require(t, url,
		promtest.Series("difctl_volume_repairs_total", 0, "volume", "disk"),
		promtest.Series("difctl_volume_unrepairable_blocks_total", 0, "volume", "disk"))
	dev.WriteAt([]byte("rot"), 4096+10)   // block 1: a good copy on the leg
	dev.WriteAt([]byte("rot"), 3*4096+10) // block 3: none
	leg.WriteAt([]byte("rot!"), 3*4096+10)
	buf := make([]byte, 4096)
	if _, err := vol.ReadAt(buf, 4096); err != nil {
		t.Fatalf("read of a block repaired from the leg: %v", err)
	}
	if _, err := vol.ReadAt(buf, 3*4096); err == nil {
		t.Fatal("read of a block bad on both legs succeeded")
	}
	promtest.Require(t, url,
		promtest.Series("difctl_volume_repairs_total", 1, "volume", "disk"),
		promtest.Series("difctl_volume_unrepairable_blocks_total", 1, "volume", "disk"))
}
