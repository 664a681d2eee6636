package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev/nbd"
)

// serveHeapBudget bounds the Go heap of TestServeHeapBounded's server:
// serve's fixed budgets at their defaults (the write staging, 32 MiB; the
// request buffers, 8 MiB per connection; the overlay of unsynced tuples,
// 32 MiB; the tuple cache, 32 MiB; the store's 1 MiB fold batches and its
// write-ahead log buffers), which do not all fill at once, with room for
// the collector's headroom. What the test measures and what it measured
// before are in docs/performance.md.
const serveHeapBudget = 128 << 20

// TestServeHeapBounded serves a large sparse 512+8 image in-process and
// drives it with real clients (a sequential copy with nbdcopy, then random
// 4 KiB writes and reads with fio), sampling the Go heap: its peak must
// stay under serveHeapBudget. Random writes over a large volume are what
// made it grow: each took a 12 KiB overlay page of its own, and the fold
// that commits them asked for a store batch sized per write, not per page
// (over a gigabyte of heap for 256 MiB of random writes). It skips when
// GOGC is set (serve then keeps it) or the clients are not installed.
func TestServeHeapBounded(t *testing.T) {
	for _, tool := range []string{"nbdcopy", "fio"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (Debian: libnbd-bin, fio)", tool)
		}
	}
	if _, set := os.LookupEnv("GOGC"); set {
		t.Skip("GOGC is set: serve keeps it, and the heap's headroom with it")
	}
	size, copyMiB, ios := int64(16<<30), 512, 32768
	if testing.Short() {
		size, copyMiB, ios = 4<<30, 128, 16384
	}
	dir := t.TempDir()
	img := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"protect", "--quiet", "--format", "512+8", img}, nil, &out, &errb); code != 0 {
		t.Fatalf("protect: %d %s", code, errb.String())
	}
	src := filepath.Join(dir, "src")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	chunk := make([]byte, 1<<20)
	for range copyMiB {
		for i := 0; i < len(chunk); i += 8 {
			binary.LittleEndian.PutUint64(chunk[i:], r.Uint64())
		}
		if _, err := f.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	sock := filepath.Join(dir, "s.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := startServe(t, ctx, serveOptions{Images: []string{img}, Socket: sock, NoControl: true, MaxConns: nbd.DefaultMaxConnections})
	if srv.ended {
		t.Fatalf("serve: %v; %s", srv.err, srv.stderr.String())
	}
	runtime.GC() // what the test made before is not the server's
	peak := make(chan uint64)
	stop := make(chan struct{})
	go func() { peak <- sampleHeap(stop) }()
	uri := "nbd+unix:///disk.img?socket=" + sock
	fio := func(rw string) {
		t.Helper()
		cmd := exec.Command("fio", "--name=heap", "--ioengine=nbd", "--uri="+uri, "--rw="+rw, "--bs=4k", "--iodepth=16",
			"--number_ios="+strconv.Itoa(ios), "--end_fsync=1", "--randrepeat=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("fio --rw=%s: %v\n%s", rw, err, out)
		}
	}
	start := time.Now()
	if out, err := exec.Command("nbdcopy", src, uri).CombinedOutput(); err != nil {
		t.Fatalf("nbdcopy: %v\n%s", err, out)
	}
	fio("randwrite")
	fio("randread")
	close(stop)
	p := <-peak
	cancel()
	if ok, err := srv.wait(); !ok || (err != nil && !errors.Is(err, context.Canceled)) {
		t.Fatalf("serve: stopped %v, %v; %s", ok, err, srv.stderr.String())
	}
	t.Logf("%d MiB copied, %d random writes and reads over %d GiB in %v: Go heap peak %.1f MiB", copyMiB, ios, size>>30, time.Since(start).Round(time.Millisecond), float64(p)/(1<<20))
	if p > serveHeapBudget {
		t.Errorf("the server's Go heap peaked at %.1f MiB, over the budget of %d MiB", float64(p)/(1<<20), serveHeapBudget>>20)
	}
}

// sampleHeap returns the most heap memory taken by objects (live, or dead
// and not yet swept) seen in samples every millisecond until stop closes.
func sampleHeap(stop <-chan struct{}) uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var most uint64
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		metrics.Read(s)
		most = max(most, s[0].Value.Uint64())
		select {
		case <-stop:
			return most
		case <-tick.C:
		}
	}
}
