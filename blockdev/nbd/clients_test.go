package nbd

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/difctl/difctl/blockdev/scrub"
)

// failures collects Options.OnFailure calls.
type failures struct {
	mu sync.Mutex
	fs []Failure
}

func (f *failures) add(x Failure) { f.mu.Lock(); f.fs = append(f.fs, x); f.mu.Unlock() }
func (f *failures) get() []Failure {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Failure(nil), f.fs...)
}

// TestQemuIO drives the export with qemu-io: patterns, discards, zero
// writes, flushes and asynchronous writes; then a block corrupted behind
// the server's back makes qemu-io's read fail with an I/O error and is
// recorded as a finding.
func TestQemuIO(t *testing.T) {
	need(t, "qemu-io")
	for _, format := range []string{"4096+8", "512+8"} {
		t.Run("format="+format, func(t *testing.T) {
			dir := t.TempDir()
			tv := newTestVolume(t, dir, 16<<20, format)
			var fl failures
			ts := startServer(t, dir, []Export{{Name: "disk", Volume: tv.vol}}, Options{OnFailure: fl.add})
			u := ts.uri("disk")
			out := run(t, "qemu-io", "-f", "raw",
				"-c", "write -P 0xab 0 1M",
				"-c", "write -P 0xcd 1536k 513", // partial blocks: read-modify-write
				"-c", "aio_write -P 0x11 4M 64k",
				"-c", "aio_write -P 0x22 5M 64k",
				"-c", "aio_flush",
				"-c", "flush",
				"-c", "read -P 0xab 0 1M",
				"-c", "read -P 0xcd 1536k 513",
				"-c", "read -P 0 1537k 511",
				"-c", "read -P 0x11 4M 64k",
				"-c", "read -P 0x22 5M 64k",
				"-c", "discard 0 512k",
				"-c", "read -P 0 0 512k",
				"-c", "read -P 0xab 512k 512k",
				"-c", "write -z 8M 1M",
				"-c", "read -P 0 8M 1M",
				"-c", "write -z -u 9M 1M",
				"-c", "read -P 0 9M 1M",
				u)
			if strings.Contains(out, "Pattern verification failed") || strings.Contains(out, "failed") {
				t.Fatalf("qemu-io:\n%s", out)
			}
			if fs := tv.findings(t); len(fs) != 0 {
				t.Fatalf("findings before any corruption: %+v", fs)
			}
			// Corrupt one block of the 0xab range behind the server.
			tv.corrupt(t, 600<<10+5)
			out, err := runErr("qemu-io", "-f", "raw", "-c", "read -P 0xab 592k 16k", u)
			if err == nil || !strings.Contains(out, "Input/output error") {
				t.Fatalf("read of a corrupted block: err %v, output:\n%s", err, out)
			}
			// A write of part of the failing block is refused (EIO) and
			// launders nothing: the block still fails. (qemu aligns
			// writes to the 512-byte minimum itself: its own read of the
			// block fails, and qemu 7.2 then writes the whole 512 bytes
			// anyway, which replaces a 512-byte block legitimately; with
			// 4096-byte blocks the server's read-modify-write refuses it.)
			if format == "4096+8" {
				out, err = runErr("qemu-io", "-f", "raw", "-c", fmt.Sprintf("write -P 0x77 %d 100", 600<<10+200), u)
				if err == nil || !strings.Contains(out, "Input/output error") {
					t.Fatalf("partial write into a corrupted block: err %v, output:\n%s", err, out)
				}
				if out, err := runErr("qemu-io", "-f", "raw", "-c", "read 600k 512", u); err == nil {
					t.Fatalf("the corrupted block reads after a partial write:\n%s", out)
				}
			}
			// The blocks around it still read.
			run(t, "qemu-io", "-f", "raw", "-c", "read -P 0xab 512k 64k", "-c", "read -P 0xab 640k 64k", u)
			bad := int64(600<<10+5) / int64(tv.vol.BlockSize())
			fs := tv.findings(t)
			if len(fs) == 0 || int64(fs[0].LBA) != bad || fs[0].State != scrub.FindingOpen {
				t.Fatalf("findings %+v, want an open finding at block %d", fs, bad)
			}
			if got := fl.get(); len(got) == 0 || got[0].Op != "read" || len(got[0].Findings) == 0 {
				t.Errorf("OnFailure calls %+v", got)
			}
		})
	}
}

// randomFile writes size bytes of random data, with some zero runs, to a
// file in dir.
func randomFile(t testing.TB, dir, name string, size int) string {
	t.Helper()
	b := make([]byte, size)
	r := rand.New(rand.NewPCG(uint64(size), 7))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	for i := 0; i+(256<<10) <= size; i += 1 << 20 {
		clear(b[i : i+256<<10])
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestQemuImgAndNbdcopy copies a source image to the export and back with
// qemu-img convert and nbdcopy, and compares with qemu-img compare.
func TestQemuImgAndNbdcopy(t *testing.T) {
	need(t, "qemu-img", "nbdcopy")
	size := 32 << 20
	if testing.Short() {
		size = 8 << 20
	}
	dir := t.TempDir()
	tv := newTestVolume(t, dir, int64(size), "4096+8")
	ts := startServer(t, dir, []Export{{Name: "disk", Volume: tv.vol}}, Options{})
	u := ts.uri("disk")
	src := randomFile(t, dir, "src.img", size)
	run(t, "qemu-img", "convert", "-n", "-f", "raw", "-O", "raw", src, u)
	run(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", src, u)
	back := filepath.Join(dir, "back.img")
	run(t, "qemu-img", "convert", "-f", "raw", "-O", "raw", u, back)
	run(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", src, back)

	// nbdcopy: a second source over the first, then back to a file.
	src2 := randomFile(t, dir, "src2.img", size/2)
	if err := os.Truncate(src2, int64(size)); err != nil {
		t.Fatal(err)
	}
	run(t, "nbdcopy", src2, u)
	back2 := filepath.Join(dir, "back2.img")
	run(t, "nbdcopy", u, back2)
	run(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", src2, back2)
	run(t, "nbdcopy", u, "null:")
	// Everything written verifies.
	rep, err := scrub.Run(t.Context(), tv.vol, scrub.Options{})
	if err != nil || rep.Failed != 0 {
		t.Fatalf("scrub after the copies: %v, %d failed", err, rep.Failed)
	}
}

// TestNbdinfo checks size, block sizes, flags and --map (discarded and
// never-written ranges as holes that read as zeros).
func TestNbdinfo(t *testing.T) {
	need(t, "nbdinfo", "qemu-io")
	dir := t.TempDir()
	tv := newTestVolume(t, dir, 8<<20, "4096+8")
	ts := startServer(t, dir, []Export{{Name: "disk", Volume: tv.vol}}, Options{})
	u := ts.uri("disk")
	var info struct {
		Exports []struct {
			Size     int64 `json:"export-size"`
			Min      int   `json:"block_size_minimum"`
			Pref     int   `json:"block_size_preferred"`
			Max      int   `json:"block_size_maximum"`
			Multi    bool  `json:"can_multi_conn"`
			FastZero bool  `json:"can_fast_zero"`
			Trim     bool  `json:"can_trim"`
			FUA      bool  `json:"can_fua"`
		} `json:"exports"`
		Structured bool `json:"protocol-structured"`
	}
	out := run(t, "nbdinfo", "--json", u)
	if err := json.Unmarshal([]byte(out), &info); err != nil || len(info.Exports) != 1 {
		t.Fatalf("nbdinfo --json: %v\n%s", err, out)
	}
	e := info.Exports[0]
	if e.Size != 8<<20 || e.Min != 512 || e.Pref != 4096 || e.Max != DefaultMaxPayload || !e.Multi || !e.FastZero || !e.Trim || !e.FUA {
		t.Errorf("nbdinfo: %+v", e)
	}
	// Fresh: all hole. Write 1 MiB at 1 MiB, discard 256 KiB of it.
	if m := run(t, "nbdinfo", "--map", "--totals", u); strings.Join(strings.Fields(m), " ") != "8388608 100.0% 3 hole,zero" {
		t.Errorf("map of a fresh volume:\n%s", m)
	}
	run(t, "qemu-io", "-f", "raw", "-c", "write -P 1 1M 1M", "-c", "discard 1280k 256k", u)
	want := "" +
		"0 1048576 3\n" +
		"1048576 262144 0\n" +
		"1310720 262144 3\n" +
		"1572864 524288 0\n" +
		"2097152 6291456 3\n"
	m := run(t, "nbdinfo", "--map", u)
	var got strings.Builder
	for line := range strings.Lines(m) {
		f := strings.Fields(line)
		if len(f) >= 3 {
			got.WriteString(f[0] + " " + f[1] + " " + f[2] + "\n")
		}
	}
	if got.String() != want {
		t.Errorf("nbdinfo --map:\n%s\nwant\n%s", got.String(), want)
	}
}

// TestNbdsh runs libnbd scripts: structured replies with the error offset
// of a corrupted block, block-size constraints, out-of-range requests,
// and reads without structured replies.
func TestNbdsh(t *testing.T) {
	py := nbdPython(t)
	dir := t.TempDir()
	tv := newTestVolume(t, dir, 4<<20, "4096+8")
	ts := startServer(t, dir, []Export{{Name: "disk", Volume: tv.vol}}, Options{})
	u := ts.uri("disk")
	run(t, py, "-mnbd", "-u", u, "-c", `
import errno
h.pwrite(b"\x5a" * 65536, 65536)
h.flush()
assert h.get_block_size(nbd.SIZE_MINIMUM) == 512
assert h.get_block_size(nbd.SIZE_PREFERRED) == 4096
assert h.get_block_size(nbd.SIZE_MAXIMUM) == 32 << 20
assert h.get_structured_replies_negotiated()
# libnbd checks ranges itself; let the requests reach the server
h.set_strict_mode(0)
for off, n in ((4 << 20, 512), ((4 << 20) - 512, 1024)):
    try:
        h.pread(n, off)
        raise AssertionError("read beyond the end succeeded")
    except nbd.Error as e:
        assert "command failed" in str(e) and "EINVAL" in str(e), e
`)
	tv.corrupt(t, 65536+3*4096+100) // block 19
	out := run(t, py, "-mnbd", "-u", u, "-c", `
import errno
chunks = []
def chunk(subbuf, offset, status, err):
    chunks.append((offset, len(subbuf), status, err.value))
    return 0
buf = bytearray(32768)
try:
    h.pread_structured(32768, 65536, chunk)
    raise AssertionError("read of a corrupted block succeeded")
except nbd.Error as e:
    assert "command failed" in str(e) and "EIO" in str(e), e
print(chunks)
data = [c for c in chunks if c[2] == nbd.READ_DATA]
errs = [c for c in chunks if c[2] == nbd.READ_ERROR]
assert data == [(65536, 12288, nbd.READ_DATA, 0)], data
assert len(errs) == 1 and errs[0][0] == 65536 + 12288 and errs[0][3] == errno.EIO, errs
# the good blocks after it still read
assert h.pread(4096, 65536 + 4 * 4096) == b"\x5a" * 4096
# a write of part of the failing block is refused, and launders nothing
# (unaligned to the 512-byte minimum: libnbd would refuse it itself)
h.set_strict_mode(0)
try:
    h.pwrite(b"\x01" * 100, 65536 + 3 * 4096 + 1000)
    raise AssertionError("partial write into a corrupted block succeeded")
except nbd.Error as e:
    assert "command failed" in str(e) and "EIO" in str(e), e
try:
    h.pread(512, 65536 + 3 * 4096)
    raise AssertionError("the corrupted block reads after a refused partial write")
except nbd.Error as e:
    assert "EIO" in str(e), e
`)
	t.Log(out)
	// Without structured replies: EIO, and the connection goes on.
	run(t, py, "-mnbd", "-c", `
import errno
h.set_request_structured_replies(False)
h.connect_uri("`+u+`")
assert not h.get_structured_replies_negotiated()
try:
    h.pread(8192, 65536 + 2 * 4096)
    raise AssertionError("read of a corrupted block succeeded")
except nbd.Error as e:
    assert "command failed" in str(e) and "EIO" in str(e), e
assert h.pread(4096, 65536) == b"\x5a" * 4096
`)
	fs := tv.findings(t)
	if len(fs) == 0 || fs[0].LBA != 19 || fs[0].Count < 2 {
		t.Errorf("findings %+v, want block 19 seen twice", fs)
	}
}

// TestNbdshOutOfOrder sends many requests at once and checks every reply
// matches its request, whatever order they come back in.
func TestNbdshOutOfOrder(t *testing.T) {
	py := nbdPython(t)
	dir := t.TempDir()
	tv := newTestVolume(t, dir, 8<<20, "512+8")
	ts := startServer(t, dir, []Export{{Name: "disk", Volume: tv.vol}}, Options{MaxInFlight: 8})
	run(t, py, "-mnbd", "-u", ts.uri("disk"), "-c", `
import os
bufs = {}
for i in range(64):
    data = bytes([i]) * (4096 * (1 + i % 5))
    h.aio_pwrite(data, i * 65536)
while h.aio_in_flight() > 0:
    h.poll(-1)
h.flush()
cookies = {}
for i in range(64):
    b = nbd.Buffer(4096 * (1 + i % 5))
    cookies[h.aio_pread(b, i * 65536)] = (i, b)
while h.aio_in_flight() > 0:
    h.poll(-1)
for c, (i, b) in cookies.items():
    assert h.aio_command_completed(c) or True
    assert b.to_bytearray() == bytes([i]) * (4096 * (1 + i % 5)), i
`)
}
