package nbdclient

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev/internal/nbdproto"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/nbd"
)

// The tests in this file run against the repository's own NBD server
// (blockdev/nbd) serving a protected volume in this process.

// TestRepoServer reads, writes, syncs, discards and trims through unix
// sockets and TCP, and checks the geometry, the flags, the range and
// alignment checks (which send nothing) and Close.
func TestRepoServer(t *testing.T) {
	const size = 8 << 20
	for _, tc := range []struct {
		name string
		url  func(*repoServer) string
	}{
		{"transport=unix", func(rs *repoServer) string { return rs.unixURL("disk") }},
		{"transport=tcp", func(rs *repoServer) string { return "nbd://" + rs.addr + "/disk" }},
		{"transport=unix/default-export", func(rs *repoServer) string { return "nbd+unix:///?socket=" + rs.sock }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noLeak(t)
			rs := startRepoServer(t, size, true, nbd.Options{})
			d := open(t, tc.url(rs), Options{})
			if d.Size() != size || d.LogicalBlockSize() != 512 || d.PhysicalBlockSize() != 4096 {
				t.Fatalf("size %d, block sizes %d/%d, want %d, 512/4096", d.Size(), d.LogicalBlockSize(), d.PhysicalBlockSize(), size)
			}
			in := d.Info()
			if !in.Flush || !in.FUA || !in.Trim || !in.WriteZeroes || in.ReadOnly || in.TLS != "" ||
				in.MinBlock != 512 || in.PreferredBlock != 4096 || in.MaxBlock != 32<<20 {
				t.Fatalf("info %+v", in)
			}
			p := pattern(3<<20, 1)
			if n, err := d.WriteAt(p, 512); err != nil || n != len(p) {
				t.Fatalf("WriteAt: %d, %v", n, err)
			}
			if err := d.Sync(); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(p))
			if n, err := d.ReadAt(got, 512); err != nil || n != len(p) || !bytes.Equal(got, p) {
				t.Fatalf("ReadAt: %d, %v, equal %v", n, err, bytes.Equal(got, p))
			}
			// Discard reads back as zeros, partial protection blocks
			// included (the server writes those).
			if err := d.Discard(1024, 64<<10+512); err != nil {
				t.Fatal(err)
			}
			clear(p[512 : 512+64<<10+512])
			if _, err := d.ReadAt(got, 512); err != nil || !bytes.Equal(got, p) {
				t.Fatalf("after Discard: %v, equal %v", err, bytes.Equal(got, p))
			}
			if err := d.Trim(1<<20, 1<<20); err != nil {
				t.Fatal(err)
			}
			// The server reports a request after its reply: wait for the
			// trim's report before counting what comes next.
			rs.reqs.waitFor(t, nbd.OpTrim)
			// Refused locally: nothing reaches the server.
			for _, c := range []struct {
				name string
				err  error
				want error
			}{
				{"read past the end", d.readErr(make([]byte, 1024), size-512), device.ErrOutOfRange},
				{"read at a negative offset", d.readErr(make([]byte, 512), -512), device.ErrOutOfRange},
				{"write past the end", d.writeErr(make([]byte, 512), size), device.ErrOutOfRange},
				{"unaligned read", d.readErr(make([]byte, 100), 0), device.ErrUnaligned},
				{"unaligned write", d.writeErr(make([]byte, 512), 7), device.ErrUnaligned},
				{"discard past the end", d.Discard(size-512, 1024), device.ErrOutOfRange},
				{"unaligned discard", d.Discard(0, 100), device.ErrUnaligned},
			} {
				if !errors.Is(c.err, c.want) {
					t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
				}
			}
			if n, err := d.ReadAt(nil, size); n != 0 || err != nil {
				t.Errorf("empty read at the end: %d, %v", n, err)
			}
			if err := d.Sync(); err != nil {
				t.Fatal(err)
			}
			if ev := rs.reqs.waitFor(t, nbd.OpFlush); len(ev) != 1 {
				t.Errorf("requests refused locally reached the server: %+v", ev)
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			for name, err := range map[string]error{
				"ReadAt": d.readErr(got, 0), "WriteAt": d.writeErr(got, 0), "Sync": d.Sync(),
				"Discard": d.Discard(0, 512), "Trim": d.Trim(0, 512), "Close": d.Close(),
			} {
				if !errors.Is(err, device.ErrClosed) {
					t.Errorf("%s after Close: %v, want device.ErrClosed", name, err)
				}
			}
			// NBD_CMD_DISC: the server saw an orderly end.
			rs.stop()
			if errs := rs.errs.get(); len(errs) != 0 {
				t.Errorf("server connection errors: %v", errs)
			}
		})
	}
}

func (d *Device) readErr(p []byte, off int64) error {
	_, err := d.ReadAt(p, off)
	return err
}

func (d *Device) writeErr(p []byte, off int64) error {
	_, err := d.WriteAt(p, off)
	return err
}

// TestRepoServerConcurrent runs many goroutines of reads, writes,
// discards and syncs over one device, with a small in-flight budget, each
// checked against a model, then the whole device.
func TestRepoServerConcurrent(t *testing.T) {
	size, workers, ops := int64(16<<20), 16, 60
	if testing.Short() {
		size, workers, ops = 4<<20, 8, 20
	}
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"budget=default", Options{}},
		{"budget=4-requests", Options{MaxInflight: 4}},
		{"budget=256KiB", Options{MaxInflightBytes: 256 << 10, MaxPayload: 128 << 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noLeak(t)
			rs := startRepoServer(t, size, false, nbd.Options{})
			d := open(t, rs.unixURL("disk"), tc.opts)
			workload(t, d, make([]byte, size), workers, ops, 7)
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRepoServerSplit checks that requests longer than the maximum are
// split into pieces no longer than it, and reassembled in order.
func TestRepoServerSplit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		size    int
		opts    Options
		maxReq  int
		pieces  int
		skipped bool
	}{
		{name: "max=MaxPayload-64KiB", size: 1<<20 + 4096, opts: Options{MaxPayload: 64 << 10}, maxReq: 64 << 10, pieces: 17},
		{name: "max=MaxPayload-unaligned", size: 1 << 20, opts: Options{MaxPayload: 100000}, maxReq: 99840, pieces: 11},
		{name: "max=server-32MiB", size: 36 << 20, maxReq: 32 << 20, pieces: 2, skipped: testing.Short()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.skipped {
				t.Skip("-short")
			}
			rs := startRepoServer(t, int64(tc.size), false, nbd.Options{})
			d := open(t, rs.unixURL("disk"), tc.opts)
			p := pattern(tc.size, 3)
			if _, err := d.WriteAt(p, 0); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, tc.size)
			if _, err := d.ReadAt(got, 0); err != nil || !bytes.Equal(got, p) {
				t.Fatalf("ReadAt: %v, equal %v", err, bytes.Equal(got, p))
			}
			if err := d.Sync(); err != nil {
				t.Fatal(err)
			}
			ev := rs.reqs.waitFor(t, nbd.OpFlush)
			var reads, writes int
			for deadline := time.Now().Add(5 * time.Second); ; ev = rs.reqs.take() {
				for _, e := range ev {
					if e.Length > int64(tc.maxReq) {
						t.Errorf("%s of %d bytes, above the %d maximum", e.Op, e.Length, tc.maxReq)
					}
					switch e.Op {
					case nbd.OpRead:
						reads++
					case nbd.OpWrite:
						writes++
					}
				}
				if reads >= tc.pieces && writes >= tc.pieces || time.Now().After(deadline) {
					break
				}
				time.Sleep(time.Millisecond)
			}
			if reads != tc.pieces || writes != tc.pieces {
				t.Errorf("%d reads and %d writes, want %d each", reads, writes, tc.pieces)
			}
		})
	}
}

// TestRepoServerReadOnly: a read-only export, and Options.ReadOnly on a
// writable one, refuse writes locally and sync without a server round.
func TestRepoServerReadOnly(t *testing.T) {
	rs := startRepoServer(t, 1<<20, false, nbd.Options{})
	for _, tc := range []struct {
		name, export string
		opts         Options
	}{
		{"export=ro", "ro", Options{}},
		{"option=ReadOnly", "disk", Options{ReadOnly: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := open(t, rs.unixURL(tc.export), tc.opts)
			if d.Info().ReadOnly != (tc.export == "ro") {
				t.Errorf("Info().ReadOnly %v", d.Info().ReadOnly)
			}
			if err := d.writeErr(make([]byte, 512), 0); !errors.Is(err, device.ErrReadOnly) {
				t.Errorf("WriteAt: %v, want device.ErrReadOnly", err)
			}
			if err := d.Discard(0, 512); !errors.Is(err, device.ErrReadOnly) {
				t.Errorf("Discard: %v, want device.ErrReadOnly", err)
			}
			if err := d.Sync(); err != nil {
				t.Errorf("Sync: %v", err)
			}
			if err := d.readErr(make([]byte, 4096), 0); err != nil {
				t.Errorf("ReadAt: %v", err)
			}
		})
	}
}

// TestRepoServerIOError: a block corrupted behind the server's back fails
// verification there; the client gets an EIO reply as a *device.IOError
// wrapping a *ReplyError, and the connection goes on.
func TestRepoServerIOError(t *testing.T) {
	rs := startRepoServer(t, 1<<20, false, nbd.Options{})
	d := open(t, rs.unixURL("disk"), Options{})
	if _, err := d.WriteAt(pattern(64<<10, 5), 0); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	// Flip a byte of the device under the volume.
	var b [1]byte
	rs.dev.ReadAt(b[:], 8192+5)
	b[0] ^= 0x40
	rs.dev.WriteAt(b[:], 8192+5)

	_, err := d.ReadAt(make([]byte, 16<<10), 4096)
	var ioe *device.IOError
	var re *ReplyError
	if !errors.As(err, &ioe) || !errors.As(err, &re) || re.Errno != 5 || !errors.Is(err, syscall.EIO) {
		t.Fatalf("read of a corrupted block: %v (%T), want a *device.IOError wrapping a *ReplyError with errno 5", err, err)
	}
	if ioe.Op != "read" || ioe.Off != 4096 || ioe.Len != 16<<10 {
		t.Errorf("IOError %+v", ioe)
	}
	if errors.Is(err, ErrDisconnected) || errors.Is(err, device.ErrClosed) {
		t.Errorf("an error reply classified as the connection's end: %v", err)
	}
	// The blocks around it read, on the same connection.
	if _, err := d.ReadAt(make([]byte, 4096), 16<<10); err != nil {
		t.Fatalf("read after an error reply: %v", err)
	}
}

// TestRepoServerRefusals: an unknown export and a server that requires TLS
// are *OptionErrors saying so.
func TestRepoServerRefusals(t *testing.T) {
	rs := startRepoServer(t, 1<<20, false, nbd.Options{})
	_, err := Open(t.Context(), rs.unixURL("nope"), Options{})
	var oe *OptionError
	if !errors.As(err, &oe) || oe.Reply != nbdproto.RepErrUnknown || oe.Option != "NBD_OPT_GO" || !errors.Is(err, ErrRefused) {
		t.Errorf("unknown export: %v, want an *OptionError with NBD_REP_ERR_UNKNOWN", err)
	}

	pki := newPKI(t)
	ts := startRepoServer(t, 1<<20, false, nbd.Options{TLS: pki.serverConfig(t)})
	_, err = Open(t.Context(), ts.unixURL("disk"), Options{})
	if !errors.As(err, &oe) || oe.Reply != nbdproto.RepErrTLSReqd || !errors.Is(err, ErrRefused) {
		t.Errorf("plaintext to a TLS server: %v, want an *OptionError with NBD_REP_ERR_TLS_REQD", err)
	}
}

// TestRepoServerShutdown: a server that goes away ends the device: the
// next request fails with a *ConnError, and so does every later one.
func TestRepoServerShutdown(t *testing.T) {
	noLeak(t)
	rs := startRepoServer(t, 1<<20, false, nbd.Options{})
	d := open(t, rs.unixURL("disk"), Options{})
	if err := d.readErr(make([]byte, 512), 0); err != nil {
		t.Fatal(err)
	}
	rs.stop()
	isConnEnd(t, d.readErr(make([]byte, 512), 0))
	isConnEnd(t, d.Sync())
	if err := d.Close(); err != nil {
		t.Errorf("Close after the connection ended: %v", err)
	}
}
