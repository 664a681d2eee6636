package nbd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/scrub"
	"github.com/difctl/difctl/store"
)

// serveEnv makes the test binary a server process: it opens the protected
// image named by the variable and serves it on IMAGE.sock until killed
// (the crash test) or sent SIGTERM (the benchmark).
const serveEnv = "DIFCTL_NBD_TEST_SERVE"

func TestMain(m *testing.M) {
	if img := os.Getenv(serveEnv); img != "" {
		os.Exit(serveProcess(img))
	}
	os.Exit(m.Run())
}

func serveProcess(img string) int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "serve:", err); return 1 }
	// DIFCTL_NBD_TEST_CPUPROFILE=FILE profiles the server until it stops
	// (profiling the serve path under a real client).
	if path := os.Getenv("DIFCTL_NBD_TEST_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return fail(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return fail(err)
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	dev, err := device.OpenFile(img, device.FileOptions{})
	if err != nil {
		return fail(err)
	}
	// The store's engine sized as difctl serve sizes it (its
	// --store-cache and --store-memtable defaults, and GOGC 25 while
	// serving), so that the benchmark's resident sets are serve's.
	// DIFCTL_NBD_TEST_STORE_CACHE=N and DIFCTL_NBD_TEST_MEMTABLE=N size
	// them otherwise (to compare).
	so := store.OpenOptions{Create: true, CacheBytes: 8 << 20, MemTableBytes: 8 << 20}
	for env, p := range map[string]*int64{"DIFCTL_NBD_TEST_STORE_CACHE": &so.CacheBytes, "DIFCTL_NBD_TEST_MEMTABLE": &so.MemTableBytes} {
		if s := os.Getenv(env); s != "" {
			if *p, err = strconv.ParseInt(s, 10, 64); err != nil {
				return fail(err)
			}
		}
	}
	kv, err := store.OpenWith("pebble:"+img+".difdb", so)
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(25)
	}
	if err != nil {
		return fail(err)
	}
	// As difctl serve opens its volumes (NoMap; DIFCTL_NBD_TEST_MAP=1
	// reads through the mapping instead, to compare).
	vol, err := blockdev.Open(context.Background(), dev, kv, blockdev.Options{NoMap: os.Getenv("DIFCTL_NBD_TEST_MAP") == "", MaxUnsynced: 256 << 20})
	if err != nil {
		return fail(err)
	}
	// As difctl serve serves them (8 MiB of buffers per connection);
	// DIFCTL_NBD_TEST_INFLIGHT_BYTES=N sets Options.MaxInFlightBytes (to
	// compare budgets).
	o := Options{MaxInFlightBytes: 8 << 20}
	if s := os.Getenv("DIFCTL_NBD_TEST_INFLIGHT_BYTES"); s != "" {
		if o.MaxInFlightBytes, err = strconv.Atoi(s); err != nil {
			return fail(err)
		}
	}
	if s := os.Getenv("DIFCTL_NBD_TEST_WORKERS"); s != "" {
		if o.Workers, err = strconv.Atoi(s); err != nil {
			return fail(err)
		}
	}
	// DIFCTL_NBD_TEST_TUPLE_CACHE=N sets Export.TupleCacheBytes (to
	// compare cache sizes; default the server's).
	var tc int
	if s := os.Getenv("DIFCTL_NBD_TEST_TUPLE_CACHE"); s != "" {
		if tc, err = strconv.Atoi(s); err != nil {
			return fail(err)
		}
	}
	srv, err := NewServer([]Export{{Name: "disk", Volume: vol, TupleCacheBytes: tc}}, o)
	if err != nil {
		return fail(err)
	}
	sock := img + ".sock"
	os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := srv.Serve(ctx, l); err != nil {
		return fail(err)
	}
	// DIFCTL_NBD_TEST_MEMPROFILE=FILE writes a heap profile when the
	// server stops (what the served volume and store hold).
	if path := os.Getenv("DIFCTL_NBD_TEST_MEMPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return fail(err)
		}
		runtime.GC()
		err = pprof.WriteHeapProfile(f)
		f.Close()
		if err != nil {
			return fail(err)
		}
	}
	// DIFCTL_NBD_TEST_STATS=FILE writes what the volume holds in memory
	// when the server stops (serveStats, read by the benchmarks).
	if path := os.Getenv("DIFCTL_NBD_TEST_STATS"); path != "" {
		if err := writeServeStats(path, vol); err != nil {
			return fail(err)
		}
	}
	if err := vol.Close(); err != nil {
		return fail(err)
	}
	return 0
}

// serveStats is what a server process reports when it stops: the volume's
// tuple cache (resident pages and their bytes) and hits, and the Go heap.
type serveStats struct {
	CachePages, CacheBytes int
	Hits, Misses           int64
	HeapInuse, HeapSys     uint64
}

func writeServeStats(path string, vol *blockdev.Volume) error {
	cs := vol.Tuples().PageCacheStats()
	st := vol.Stats()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	js, err := json.Marshal(serveStats{CachePages: cs.Pages, CacheBytes: cs.Pages * pageCacheBytes(vol),
		Hits: st.TupleCacheHits, Misses: st.TupleCacheMisses, HeapInuse: ms.HeapInuse, HeapSys: ms.HeapSys})
	if err != nil {
		return err
	}
	return os.WriteFile(path, js, 0o644)
}

// pageCacheBytes is what the tuple page cache counts for one page of vol
// (store.Tuples.SetPageCache): its tuples, sector checksums and bitmap.
func pageCacheBytes(vol *blockdev.Volume) int {
	m := vol.Manifest()
	per := m.PageTuples*m.TupleSize + m.PageTuples/8
	if m.SectorSums {
		per += 4 * m.PageTuples
	}
	return per
}

// startKillable starts the test binary as a server of img (serveEnv), for
// the caller to kill, and waits until it accepts connections on img.sock.
func startKillable(t *testing.T, exe, img string) (*exec.Cmd, string) {
	t.Helper()
	srv := exec.Command(exe)
	srv.Env = append(os.Environ(), serveEnv+"="+img)
	var srvErr bytes.Buffer
	srv.Stderr = &srvErr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	sock := img + ".sock"
	for deadline := time.Now().Add(20 * time.Second); ; {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return srv, sock
		}
		if time.Now().After(deadline) {
			srv.Process.Kill()
			t.Fatalf("server did not start: %s", srvErr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var wroteRE = regexp.MustCompile(`^wrote \d+/\d+ bytes at offset (\d+)`)

// TestCrashSIGKILL kills the server process with SIGKILL while qemu-io
// writes and flushes (and writes with FUA) in a loop, restarts it, and
// checks that every write acknowledged by a flush or FUA reads back, that
// no block fails, and that a scrub of the whole volume is clean.
func TestCrashSIGKILL(t *testing.T) {
	need(t, "qemu-io")
	rounds := 4
	if testing.Short() {
		rounds = 1
	}
	const regions, regionSize = 64, 64 << 10
	dir := t.TempDir()
	tv := newTestVolume(t, dir, regions*regionSize, "4096+8")
	tv.close()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// content[r] is the pattern region r must hold (0: never written).
	var content [regions]byte
	seq := 0
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range rounds {
		srv, sock := startKillable(t, exe, tv.path)
		type write struct {
			region  int
			pattern byte
			fua     bool
		}
		var writes []write
		args := []string{"-f", "raw"}
		for i := range 1500 {
			w := write{region: rng.IntN(regions), pattern: byte((seq+i)%250 + 1), fua: i%3 == 2}
			writes = append(writes, w)
			off := w.region * regionSize
			if w.fua {
				args = append(args, "-c", fmt.Sprintf("write -f -P %d %d %d", w.pattern, off, regionSize))
			} else {
				args = append(args, "-c", fmt.Sprintf("write -P %d %d %d", w.pattern, off, regionSize), "-c", "flush")
			}
		}
		seq += len(writes)
		args = append(args, fmt.Sprintf("nbd+unix:///disk?socket=%s", sock))
		qio := exec.Command("qemu-io", args...)
		var out bytes.Buffer
		qio.Stdout, qio.Stderr = &out, &out
		if err := qio.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(150+rng.IntN(400)) * time.Millisecond)
		srv.Process.Kill()
		srv.Wait()
		qio.Wait()
		// Which writes completed, in order; a plain write is acknowledged
		// by its flush, which completed if a later write completed.
		var done []int
		for line := range strings.Lines(out.String()) {
			if m := wroteRE.FindStringSubmatch(line); m != nil {
				off, _ := strconv.Atoi(m[1])
				i := len(done)
				if i >= len(writes) || writes[i].region*regionSize != off {
					t.Fatalf("round %d: completion %d at offset %d does not follow the script", round, i, off)
				}
				done = append(done, i)
			}
		}
		if len(done) == len(writes) {
			t.Logf("round %d: all %d writes done before the kill", round, len(writes))
		}
		acked := 0
		for i := range done {
			if writes[i].fua || i+1 < len(done) {
				acked = i + 1
			}
		}
		// The writes that may or may not have reached the volume.
		maybe := map[int][]byte{}
		for i := acked; i < min(len(done)+2, len(writes)); i++ {
			maybe[writes[i].region] = append(maybe[writes[i].region], writes[i].pattern)
		}
		prev := content
		for i := range acked {
			content[writes[i].region] = writes[i].pattern
		}
		// Reopen: crash recovery, then every region verifies and holds
		// its last acknowledged pattern (or a later unacknowledged one).
		tv.reopen(t)
		buf := make([]byte, regionSize)
		for r := range regions {
			if _, err := tv.vol.ReadAt(buf, int64(r*regionSize)); err != nil {
				t.Fatalf("round %d: region %d fails after the crash: %v", round, r, err)
			}
			ok := bytes.Equal(buf, bytes.Repeat([]byte{content[r]}, regionSize))
			for _, p := range maybe[r] {
				if bytes.Equal(buf, bytes.Repeat([]byte{p}, regionSize)) {
					ok, content[r] = true, p
				}
			}
			if !ok {
				t.Fatalf("round %d: region %d holds %#x..., want %#x (acknowledged; was %#x before the round), or one of %v",
					round, r, buf[0], content[r], prev[r], maybe[r])
			}
		}
		rep, err := scrub.Run(t.Context(), tv.vol, scrub.Options{})
		if err != nil || rep.Failed != 0 {
			t.Fatalf("round %d: scrub after the crash: %v, %d blocks failed", round, err, rep.Failed)
		}
		t.Logf("round %d: %d writes completed, %d acknowledged; recovery %+v", round, len(done), acked, tv.vol.Stats().Recovery)
		tv.close()
	}
}

// TestLostLogAfterSIGKILL: the server writes and flushes, is killed, and
// the store's write-ahead log is then deleted, or truncated: the store
// lost synced commits that described the data on the device. Opening it
// must fail as a damaged store naming the log (store.ErrCorrupt, exit 8
// in the CLI), never open and blame the data for blocks whose tuples it
// forgot.
func TestLostLogAfterSIGKILL(t *testing.T) {
	need(t, "qemu-io")
	for _, damage := range []string{"delete", "truncate"} {
		t.Run(damage, func(t *testing.T) {
			dir := t.TempDir()
			tv := newTestVolume(t, dir, 1<<20, "4096+8")
			tv.close()
			exe, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			srv, sock := startKillable(t, exe, tv.path)
			out, err := exec.Command("qemu-io", "-f", "raw", "-c", "write -P 0x5a 0 32k", "-c", "flush",
				fmt.Sprintf("nbd+unix:///disk?socket=%s", sock)).CombinedOutput()
			if err != nil {
				srv.Process.Kill()
				t.Fatalf("qemu-io: %v: %s", err, out)
			}
			time.Sleep(600 * time.Millisecond) // the store records the synced watermark in the background
			srv.Process.Kill()
			srv.Wait()
			db := tv.path + ".difdb"
			logs, _ := filepath.Glob(filepath.Join(db, "*.log"))
			if len(logs) == 0 {
				t.Fatal("no write-ahead log in the store after the kill")
			}
			for _, l := range logs {
				fi, err := os.Stat(l)
				if err != nil {
					t.Fatal(err)
				}
				if damage == "delete" {
					err = os.Remove(l)
				} else {
					err = os.Truncate(l, fi.Size()/2)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			kv, err := store.Open("pebble:" + db)
			if err == nil {
				kv.Close()
				t.Fatal("the store opened after losing synced commits")
			}
			var cf *store.CorruptFileError
			if !errors.As(err, &cf) || !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "synced commits lost") {
				t.Fatalf("open: %v, want a *store.CorruptFileError for the lost commits", err)
			}
			if damage == "truncate" && !strings.HasSuffix(cf.Path, ".log") {
				t.Errorf("the error names %s, want the log", cf.Path)
			}
			t.Log(err)
		})
	}
}
