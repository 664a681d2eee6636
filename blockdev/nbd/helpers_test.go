package nbd

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev/internal/nbdproto"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// testVolume is a protected image file with its Pebble store, open.
type testVolume struct {
	path string
	dev  *device.File
	kv   store.KV
	vol  *blockdev.Volume
}

// newTestVolume creates a sparse image of size bytes in dir, protects it
// with format and opens it.
func newTestVolume(t testing.TB, dir string, size int64, format string) *testVolume {
	t.Helper()
	path := filepath.Join(dir, "disk.img")
	dev, err := device.CreateImage(path, size, device.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := store.Open("pebble:" + path + ".difdb")
	if err != nil {
		t.Fatal(err)
	}
	vol, err := blockdev.Create(context.Background(), dev, kv, blockdev.CreateOptions{Format: dif.MustFormat(format)})
	if err != nil {
		t.Fatal(err)
	}
	tv := &testVolume{path: path, dev: dev, kv: kv, vol: vol}
	t.Cleanup(tv.close)
	return tv
}

func (tv *testVolume) close() {
	if tv.vol != nil {
		tv.vol.Close()
		tv.kv.Close()
		tv.dev.Close()
		tv.vol = nil
	}
}

// reopen closes the volume and opens it again (crash recovery included).
func (tv *testVolume) reopen(t testing.TB) {
	t.Helper()
	tv.close()
	var err error
	if tv.dev, err = device.OpenFile(tv.path, device.FileOptions{}); err != nil {
		t.Fatal(err)
	}
	if tv.kv, err = store.Open("pebble:" + tv.path + ".difdb"); err != nil {
		t.Fatal(err)
	}
	if tv.vol, err = blockdev.Open(context.Background(), tv.dev, tv.kv, blockdev.Options{}); err != nil {
		t.Fatal(err)
	}
}

// findings returns the findings of the volume's log.
func (tv *testVolume) findings(t testing.TB) []store.Finding {
	t.Helper()
	var out []store.Finding
	for f, err := range tv.vol.Tuples().Findings(store.FindingQuery{}) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f)
	}
	return out
}

// corrupt flips a bit of the image file behind the volume's back (through
// the page cache, which the volume's mapping shares).
func (tv *testVolume) corrupt(t testing.TB, off int64) {
	t.Helper()
	f, err := os.OpenFile(tv.path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
}

// testServer serves exports on a unix socket in dir until the test ends.
type testServer struct {
	sock   string
	cancel context.CancelFunc
	done   chan error
}

func startServer(t testing.TB, dir string, exports []Export, opts Options) *testServer {
	t.Helper()
	srv, err := NewServer(exports, opts)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "nbd.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testServer{sock: sock, cancel: cancel, done: make(chan error, 1)}
	go func() { ts.done <- srv.Serve(ctx, l) }()
	t.Cleanup(func() { ts.stop(t) })
	return ts
}

func (ts *testServer) stop(t testing.TB) {
	if ts.cancel == nil {
		return
	}
	ts.cancel()
	ts.cancel = nil
	select {
	case err := <-ts.done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("Serve did not return 30 s after its context was cancelled")
	}
}

// uri is the NBD URI of export name.
func (ts *testServer) uri(name string) string {
	return fmt.Sprintf("nbd+unix:///%s?socket=%s", name, ts.sock)
}

// need skips the test when a client is not installed.
func need(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (Debian: qemu-utils, libnbd-bin, python3-libnbd, nbdfuse, fio, e2fsprogs)", tool)
		}
	}
}

// nbdPython returns a Python that has libnbd's module (what nbdsh runs:
// python3 -mnbd), or skips the test.
func nbdPython(t testing.TB) string {
	t.Helper()
	need(t, "nbdsh")
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		if _, err := runErr(py, "-c", "import nbd"); err == nil {
			return py
		}
	}
	t.Skip("nbdsh is installed but no python3 has its nbd module (Debian: python3-libnbd)")
	return ""
}

// run runs a command and returns its combined output, failing the test if
// it fails.
func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := runErr(name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func runErr(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return string(out), err
}

// rawClient speaks the protocol byte by byte, for the tests of what the
// real clients never send.
type rawClient struct {
	t testing.TB
	c net.Conn
}

func dialRaw(t testing.TB, sock string) *rawClient {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	return greet(t, c)
}

// greet reads the server's greeting on c and returns a raw client of it.
func greet(t testing.TB, c net.Conn) *rawClient {
	t.Helper()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	t.Cleanup(func() { c.Close() })
	rc := &rawClient{t: t, c: c}
	var h [18]byte
	rc.readFull(h[:])
	if binary.BigEndian.Uint64(h[0:]) != nbdproto.MagicInit || binary.BigEndian.Uint64(h[8:]) != nbdproto.MagicOpt {
		t.Fatalf("greeting % x", h)
	}
	if fl := binary.BigEndian.Uint16(h[16:]); fl != nbdproto.FlagFixedNewstyle|nbdproto.FlagNoZeroes {
		t.Fatalf("handshake flags %#x", fl)
	}
	return rc
}

func (rc *rawClient) readFull(b []byte) {
	rc.t.Helper()
	if _, err := io.ReadFull(rc.c, b); err != nil {
		rc.t.Fatalf("read: %v", err)
	}
}

func (rc *rawClient) write(parts ...[]byte) {
	rc.t.Helper()
	if _, err := rc.c.Write(bytes.Join(parts, nil)); err != nil {
		rc.t.Fatalf("write: %v", err)
	}
}

func u16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
func u32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func (rc *rawClient) clientFlags(f uint32) { rc.write(u32(f)) }

func (rc *rawClient) option(opt uint32, data []byte) {
	rc.write(u64(nbdproto.MagicOpt), u32(opt), u32(uint32(len(data))), data)
}

// optReply reads one option reply.
func (rc *rawClient) optReply() (opt, typ uint32, data []byte) {
	rc.t.Helper()
	var h [20]byte
	rc.readFull(h[:])
	if m := binary.BigEndian.Uint64(h[0:]); m != nbdproto.MagicOptReply {
		rc.t.Fatalf("option reply magic %#x", m)
	}
	data = make([]byte, binary.BigEndian.Uint32(h[16:]))
	rc.readFull(data)
	return binary.BigEndian.Uint32(h[8:]), binary.BigEndian.Uint32(h[12:]), data
}

// goExport negotiates structured replies (if asked), base:allocation and
// NBD_OPT_GO, and returns the export's size and flags.
func (rc *rawClient) goExport(name string, structured bool) (size uint64, flags uint16) {
	rc.t.Helper()
	if structured {
		rc.option(nbdproto.OptStructured, nil)
		if _, typ, _ := rc.optReply(); typ != nbdproto.RepAck {
			rc.t.Fatalf("structured reply: reply %#x", typ)
		}
		rc.option(nbdproto.OptSetMetaCtx, bytes.Join([][]byte{u32(uint32(len(name))), []byte(name), u32(1), u32(15), []byte(nbdproto.MetaBaseAllocation)}, nil))
		if _, typ, _ := rc.optReply(); typ != nbdproto.RepMetaCtx {
			rc.t.Fatalf("set meta context: reply %#x", typ)
		}
		if _, typ, _ := rc.optReply(); typ != nbdproto.RepAck {
			rc.t.Fatalf("set meta context: final reply %#x", typ)
		}
	}
	rc.option(nbdproto.OptGo, bytes.Join([][]byte{u32(uint32(len(name))), []byte(name), u16(0)}, nil))
	for {
		_, typ, data := rc.optReply()
		switch typ {
		case nbdproto.RepInfo:
			if binary.BigEndian.Uint16(data) == nbdproto.InfoExport {
				size, flags = binary.BigEndian.Uint64(data[2:]), binary.BigEndian.Uint16(data[10:])
			}
		case nbdproto.RepAck:
			return size, flags
		default:
			rc.t.Fatalf("go: reply %#x %q", typ, data)
		}
	}
}

func (rc *rawClient) request(typ, flags uint16, cookie, off uint64, length uint32, payload []byte) {
	rc.write(u32(nbdproto.MagicRequest), u16(flags), u16(typ), u64(cookie), u64(off), u32(length), payload)
}

// reply is one simple reply or structured chunk.
type reply struct {
	structured bool
	flags, typ uint16
	cookie     uint64
	err        uint32 // simple replies
	payload    []byte // chunks
}

// readReply reads one simple reply (its data, dataLen bytes, when it
// succeeded) or one structured chunk.
func (rc *rawClient) readReply(dataLen int) reply {
	rc.t.Helper()
	var m [4]byte
	rc.readFull(m[:])
	switch binary.BigEndian.Uint32(m[:]) {
	case nbdproto.MagicSimple:
		var h [12]byte
		rc.readFull(h[:])
		r := reply{err: binary.BigEndian.Uint32(h[0:]), cookie: binary.BigEndian.Uint64(h[4:])}
		if r.err == 0 && dataLen > 0 {
			r.payload = make([]byte, dataLen)
			rc.readFull(r.payload)
		}
		return r
	case nbdproto.MagicStructured:
		var h [16]byte
		rc.readFull(h[:])
		r := reply{structured: true, flags: binary.BigEndian.Uint16(h[0:]), typ: binary.BigEndian.Uint16(h[2:]),
			cookie: binary.BigEndian.Uint64(h[4:])}
		r.payload = make([]byte, binary.BigEndian.Uint32(h[12:]))
		rc.readFull(r.payload)
		return r
	}
	rc.t.Fatalf("reply magic % x", m)
	return reply{}
}

// closed reports whether the server has closed the connection (reading
// returns EOF or a reset within a few seconds).
func (rc *rawClient) closed() bool {
	rc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [1]byte
	for {
		_, err := rc.c.Read(b[:])
		if err != nil {
			var ne net.Error
			return !(errors.As(err, &ne) && ne.Timeout())
		}
	}
}
