package nbd

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// BenchmarkVsQemuNBD compares difctl's server with qemu-nbd serving the
// same page-cached raw image over a unix socket, side by side in each
// iteration (so each ratio comes from one run):
//
//   - op=seqread: nbdcopy of the whole export to null: (conns=1, and
//     conns=4 where the server advertises CAN_MULTI_CONN);
//   - op=randread: fio --ioengine=nbd --rw=randread --bs=4k --iodepth=16;
//   - op=seqwrite: fio --ioengine=nbd --rw=write --bs=1m --end_fsync=1
//     (qemu-nbd writes a copy of the image, difctl the protected volume).
//
// Metrics: difctl's and qemu-nbd's figures, x_qemu (difctl's speed over
// qemu-nbd's: above 1 is faster), for seqread each server's CPU time per
// copy (difctl_cpu_s, qemu_cpu_s: what the machine's load does not
// blur), and the peak resident set of this
// server process (a child running the library server, volume mappings
// included) and of qemu-nbd.
// The image is 1 GiB (DIFCTL_NBD_BENCH_MIB overrides), filled with random
// data so that nothing is a hole:
//
//	go test ./blockdev/nbd -run '^$' -bench VsQemuNBD -benchtime 3x
//
// The server reads with pread and sizes its store as difctl serve does;
// DIFCTL_NBD_TEST_MAP=1 reads through the mapping instead,
// DIFCTL_NBD_TEST_WORKERS=N and DIFCTL_NBD_TEST_INFLIGHT_BYTES=N set
// Options.Workers and MaxInFlightBytes, and DIFCTL_NBD_TEST_CPUPROFILE=FILE
// and DIFCTL_NBD_TEST_MEMPROFILE=FILE profile it (see serveProcess).
func BenchmarkVsQemuNBD(b *testing.B) {
	need(b, "qemu-nbd", "nbdcopy", "fio")
	mib := 1024
	if s := os.Getenv("DIFCTL_NBD_BENCH_MIB"); s != "" {
		mib, _ = strconv.Atoi(s)
	}
	size := int64(mib) << 20
	for _, format := range []string{"4096+8", "512+8"} {
		b.Run("format="+format, func(b *testing.B) {
			dir := b.TempDir()
			img := filepath.Join(dir, "disk.img")
			writeRandom(b, img, size)
			protectImage(b, img, format)
			// The server runs as a process of its own (this test binary,
			// see serveProcess), so that its resident set is its own.
			dpid := startServeProcess(b, img)
			dif := "nbd+unix:///disk?socket=" + img + ".sock"
			// qemu-nbd read-only on the same image, and writable on a copy.
			qsock, wsock := filepath.Join(dir, "q.sock"), filepath.Join(dir, "w.sock")
			qpid := startQemuNBD(b, qsock, "-r", "-e", "4", img)
			wimg := filepath.Join(dir, "w.img")
			writeRandom(b, wimg, size)
			startQemuNBD(b, wsock, "-e", "4", wimg)
			qemu, qemuW := "nbd+unix:///?socket="+qsock, "nbd+unix:///?socket="+wsock
			run(b, "nbdcopy", dif, "null:") // warm both paths
			run(b, "nbdcopy", qemu, "null:")

			for _, conns := range []int{1, 4} {
				b.Run(fmt.Sprintf("op=seqread/conns=%d", conns), func(b *testing.B) {
					b.SetBytes(size)
					var td, tq, cd, cq time.Duration
					for b.Loop() {
						d0 := cpuTime(b, dpid)
						td += timed(b, "nbdcopy", fmt.Sprintf("--connections=%d", conns), dif, "null:")
						cd += cpuTime(b, dpid) - d0
						q0 := cpuTime(b, qpid)
						tq += timed(b, "nbdcopy", fmt.Sprintf("--connections=%d", conns), qemu, "null:")
						cq += cpuTime(b, qpid) - q0
					}
					n := float64(b.N)
					b.ReportMetric(td.Seconds()/n, "difctl_s")
					b.ReportMetric(tq.Seconds()/n, "qemu_s")
					b.ReportMetric(cd.Seconds()/n, "difctl_cpu_s")
					b.ReportMetric(cq.Seconds()/n, "qemu_cpu_s")
					b.ReportMetric(tq.Seconds()/td.Seconds(), "x_qemu")
				})
			}
			b.Run("op=randread/bs=4k/iodepth=16", func(b *testing.B) {
				var id, iq float64
				for b.Loop() {
					id += fioIOPS(b, dif, "--rw=randread", "--bs=4k", "--iodepth=16", "--runtime=5", "--time_based")
					iq += fioIOPS(b, qemu, "--rw=randread", "--bs=4k", "--iodepth=16", "--runtime=5", "--time_based")
				}
				b.ReportMetric(id/float64(b.N), "difctl_iops")
				b.ReportMetric(iq/float64(b.N), "qemu_iops")
				b.ReportMetric(id/iq, "x_qemu")
			})
			b.Run("op=seqwrite/bs=1m/end_fsync", func(b *testing.B) {
				b.SetBytes(size)
				var wd, wq float64
				for b.Loop() {
					wd += fioBW(b, dif, "--rw=write", "--bs=1m", "--iodepth=16", "--end_fsync=1")
					wq += fioBW(b, qemuW, "--rw=write", "--bs=1m", "--iodepth=16", "--end_fsync=1")
				}
				b.ReportMetric(wd/float64(b.N), "difctl_MiB/s")
				b.ReportMetric(wq/float64(b.N), "qemu_MiB/s")
				b.ReportMetric(wd/wq, "x_qemu")
			})
			// Last, the peak resident sets after all of the above (reported
			// by a sub-benchmark: a parent's metrics are not printed).
			b.Run("op=rss", func(b *testing.B) {
				for b.Loop() {
				}
				b.ReportMetric(float64(peakRSS(b, dpid))/(1<<20), "difctl_peak_rss_MiB")
				b.ReportMetric(float64(statusKB(dpid, "RssAnon:"))/(1<<10), "difctl_anon_MiB")
				b.ReportMetric(float64(statusKB(dpid, "RssFile:"))/(1<<10), "difctl_file_MiB")
				b.ReportMetric(float64(peakRSS(b, qpid))/(1<<20), "qemu_peak_rss_MiB")
			})
		})
	}
}

// protectImage protects the image at path with format, its store beside
// it, and closes it.
func protectImage(b testing.TB, path, format string) {
	dev, err := device.OpenFile(path, device.FileOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer dev.Close()
	kv, err := store.Open("pebble:" + path + ".difdb")
	if err != nil {
		b.Fatal(err)
	}
	defer kv.Close()
	vol, err := blockdev.Create(context.Background(), dev, kv, blockdev.CreateOptions{Format: dif.MustFormat(format)})
	if err != nil {
		b.Fatal(err)
	}
	if err := vol.Close(); err != nil {
		b.Fatal(err)
	}
}

// startServeProcess serves the protected image at path from a child
// process on path.sock and returns its pid; it is stopped with SIGTERM
// when the benchmark ends.
func startServeProcess(b testing.TB, path string, env ...string) int {
	pid, stop := startServeProcessStop(b, path, env...)
	b.Cleanup(stop)
	return pid
}

// startServeProcessStop is startServeProcess with the environment
// variables env (NAME=VALUE) added, returning a function that stops the
// server with SIGTERM and waits for it to exit (safe to call twice).
func startServeProcessStop(b testing.TB, path string, env ...string) (int, func()) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(append(os.Environ(), serveEnv+"="+path), env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	var once sync.Once
	stop := func() { once.Do(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }) }
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("unix", path+".sock"); err == nil {
			c.Close()
			return cmd.Process.Pid, stop
		}
	}
	stop()
	b.Fatal("the server process did not start")
	return 0, nil
}

// writeRandom writes size bytes of random data to path, 4 MiB at a time.
func writeRandom(b testing.TB, path string, size int64) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	r := rand.New(rand.NewPCG(uint64(size), 11))
	buf := make([]byte, 4<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		for i := 0; i < len(buf); i += 8 {
			v := r.Uint64()
			for k := range 8 {
				buf[i+k] = byte(v >> (8 * k))
			}
		}
		if _, err := f.WriteAt(buf[:min(int64(len(buf)), size-off)], off); err != nil {
			b.Fatal(err)
		}
	}
}

// startQemuNBD serves an image with qemu-nbd on a unix socket and returns
// its pid; it is killed when the benchmark ends.
func startQemuNBD(b testing.TB, sock string, args ...string) int {
	cmd := exec.Command("qemu-nbd", append([]string{"-t", "-f", "raw", "-k", sock}, args...)...)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return cmd.Process.Pid
		}
	}
	b.Fatal("qemu-nbd did not start")
	return 0
}

func timed(b testing.TB, name string, args ...string) time.Duration {
	start := time.Now()
	run(b, name, args...)
	return time.Since(start)
}

// fioJob runs one fio job with the nbd engine and returns its JSON.
func fioJob(b testing.TB, uri string, args ...string) map[string]any {
	all := append([]string{"--name=job", "--ioengine=nbd", "--uri=" + uri, "--output-format=json"}, args...)
	out := run(b, "fio", all...)
	var res struct {
		Jobs []map[string]any `json:"jobs"`
	}
	if i := strings.IndexByte(out, '{'); i >= 0 {
		out = out[i:]
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Jobs) != 1 {
		b.Fatalf("fio output: %v\n%s", err, out)
	}
	return res.Jobs[0]
}

func fioIOPS(b testing.TB, uri string, args ...string) float64 {
	j := fioJob(b, uri, args...)
	return j["read"].(map[string]any)["iops"].(float64)
}

// fioBW returns the write bandwidth in MiB/s, the final fsync included
// (bytes over the job's run time).
func fioBW(b testing.TB, uri string, args ...string) float64 {
	j := fioJob(b, uri, args...)
	w := j["write"].(map[string]any)
	bytes := w["io_bytes"].(float64)
	ms := j["job_runtime"].(float64)
	if sync, ok := j["sync"].(map[string]any); ok {
		if lat, ok := sync["lat_ns"].(map[string]any); ok {
			ms += lat["max"].(float64) / 1e6
		}
	}
	return bytes / (1 << 20) / (ms / 1000)
}

// cpuTime returns the user and system CPU time a process has used so far
// (/proc/PID/stat, in clock ticks of 10 ms).
func cpuTime(b testing.TB, pid int) time.Duration {
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The command name, in parentheses, may hold spaces: fields count
	// from the last ')'.
	f := strings.Fields(string(s[strings.LastIndexByte(string(s), ')')+1:]))
	if len(f) < 13 {
		b.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// peakRSS returns a process's peak resident set (VmHWM) in bytes.
func peakRSS(b testing.TB, pid int) int64 { return statusKB(pid, "VmHWM:") << 10 }

// statusKB returns a field of /proc/PID/status in KiB (0 if absent).
func statusKB(pid int, field string) int64 {
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(s)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb
		}
	}
	return 0
}
