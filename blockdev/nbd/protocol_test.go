package nbd

import (
	"bytes"
	"context"
	"encoding/binary"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev/internal/nbdproto"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/faultdev"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// TestHandshakeOptions drives the negotiation with options real clients
// rarely send, checking each reply and that the next option still works.
func TestHandshakeOptions(t *testing.T) {
	dir := t.TempDir()
	tv := newTestVolume(t, dir, 1<<20, "4096+8")
	ts := startServer(t, dir, []Export{{Name: "disk", Description: "the disk", Volume: tv.vol}}, Options{})
	name := []byte("disk")
	goData := func(n string, infos ...uint16) []byte {
		b := append(u32(uint32(len(n))), n...)
		b = append(b, u16(uint16(len(infos)))...)
		for _, i := range infos {
			b = append(b, u16(i)...)
		}
		return b
	}
	tests := []struct {
		name string
		opt  uint32
		data []byte
		want uint32
	}{
		{"unknown", 200, []byte("xyz"), nbdproto.RepErrUnsup},
		{"extended-headers", nbdproto.OptExtendedHeader, nil, nbdproto.RepErrUnsup},
		{"list-with-data", nbdproto.OptList, []byte{1}, nbdproto.RepErrInvalid},
		{"starttls-without-tls", nbdproto.OptStartTLS, nil, nbdproto.RepErrPolicy},
		{"meta-before-structured", nbdproto.OptSetMetaCtx, nil, nbdproto.RepErrInvalid},
		{"info-unknown-export", nbdproto.OptInfo, goData("nope"), nbdproto.RepErrUnknown},
		{"info-short", nbdproto.OptInfo, []byte{0, 0}, nbdproto.RepErrInvalid},
		{"info-name-too-long", nbdproto.OptInfo, append(u32(100), 0, 0), nbdproto.RepErrInvalid},
		{"info-bad-count", nbdproto.OptInfo, append(goData("disk"), 0), nbdproto.RepErrInvalid},
		{"structured-with-data", nbdproto.OptStructured, []byte{1}, nbdproto.RepErrInvalid},
		{"too-big", nbdproto.OptInfo, make([]byte, maxOptionData+1), nbdproto.RepErrTooBig},
	}
	rc := dialRaw(t, ts.sock)
	rc.clientFlags(nbdproto.ClientFixedNewstyle | nbdproto.ClientNoZeroes)
	for _, tt := range tests {
		t.Run("opt="+tt.name, func(t *testing.T) {
			rc.t = t
			rc.option(tt.opt, tt.data)
			opt, typ, _ := rc.optReply()
			if opt != tt.opt || typ != tt.want {
				t.Errorf("reply to option %d: option %d type %#x, want %#x", tt.opt, opt, typ, tt.want)
			}
		})
	}
	rc.t = t
	// LIST names the export with its description.
	rc.option(nbdproto.OptList, nil)
	if _, typ, data := rc.optReply(); typ != nbdproto.RepServer || !bytes.Equal(data, append(u32(4), "diskthe disk"...)) {
		t.Errorf("list: %#x %q", typ, data)
	}
	if _, typ, _ := rc.optReply(); typ != nbdproto.RepAck {
		t.Errorf("list: final %#x", typ)
	}
	// LIST_META_CONTEXT needs structured replies; then lists base:allocation.
	rc.option(nbdproto.OptStructured, nil)
	if _, typ, _ := rc.optReply(); typ != nbdproto.RepAck {
		t.Fatalf("structured: %#x", typ)
	}
	rc.option(nbdproto.OptListMetaCtx, bytes.Join([][]byte{u32(4), name, u32(0)}, nil))
	if _, typ, data := rc.optReply(); typ != nbdproto.RepMetaCtx || string(data[4:]) != nbdproto.MetaBaseAllocation {
		t.Errorf("list meta: %#x %q", typ, data)
	}
	if _, typ, _ := rc.optReply(); typ != nbdproto.RepAck {
		t.Errorf("list meta: final %#x", typ)
	}
	// A query of an unknown namespace selects nothing: just the ACK.
	rc.option(nbdproto.OptSetMetaCtx, bytes.Join([][]byte{u32(4), name, u32(1), u32(7), []byte("x-foo:b")}, nil))
	if _, typ, _ := rc.optReply(); typ != nbdproto.RepAck {
		t.Errorf("set meta x-foo: %#x", typ)
	}
	// INFO with NAME and BLOCK_SIZE requested.
	rc.option(nbdproto.OptInfo, goData("", nbdproto.InfoName, nbdproto.InfoBlockSize, nbdproto.InfoDescription))
	got := map[uint16][]byte{}
	for {
		_, typ, data := rc.optReply()
		if typ == nbdproto.RepAck {
			break
		}
		if typ != nbdproto.RepInfo {
			t.Fatalf("info: %#x %q", typ, data)
		}
		got[binary.BigEndian.Uint16(data)] = data[2:]
	}
	if string(got[nbdproto.InfoName]) != "disk" || string(got[nbdproto.InfoDescription]) != "the disk" {
		t.Errorf("info name %q description %q", got[nbdproto.InfoName], got[nbdproto.InfoDescription])
	}
	if b := got[nbdproto.InfoBlockSize]; len(b) != 12 || binary.BigEndian.Uint32(b[0:]) != 512 ||
		binary.BigEndian.Uint32(b[4:]) != 4096 || binary.BigEndian.Uint32(b[8:]) != DefaultMaxPayload {
		t.Errorf("block sizes % x", b)
	}
	if e := got[nbdproto.InfoExport]; len(e) != 10 || binary.BigEndian.Uint64(e) != 1<<20 {
		t.Errorf("export info % x", e)
	}
	rc.option(nbdproto.OptAbort, nil)
	if _, typ, _ := rc.optReply(); typ != nbdproto.RepAck {
		t.Errorf("abort: %#x", typ)
	}
	if !rc.closed() {
		t.Error("connection still open after NBD_OPT_ABORT")
	}
}

// TestHandshakeHostile: bad client flags, a bad option magic and a silent
// client lose their connection; the handshake has a deadline.
func TestHandshakeHostile(t *testing.T) {
	dir := t.TempDir()
	tv := newTestVolume(t, dir, 1<<20, "512+8")
	ts := startServer(t, dir, []Export{{Name: "disk", Volume: tv.vol}}, Options{HandshakeTimeout: 300 * time.Millisecond})
	t.Run("case=bad-client-flags", func(t *testing.T) {
		rc := dialRaw(t, ts.sock)
		rc.clientFlags(1 << 7)
		if !rc.closed() {
			t.Error("not closed")
		}
	})
	t.Run("case=no-fixed-newstyle", func(t *testing.T) {
		rc := dialRaw(t, ts.sock)
		rc.clientFlags(0)
		if !rc.closed() {
			t.Error("not closed")
		}
	})
	t.Run("case=bad-option-magic", func(t *testing.T) {
		rc := dialRaw(t, ts.sock)
		rc.clientFlags(nbdproto.ClientFixedNewstyle)
		rc.write(u64(12345), u32(nbdproto.OptList), u32(0))
		if !rc.closed() {
			t.Error("not closed")
		}
	})
	t.Run("case=silent", func(t *testing.T) {
		rc := dialRaw(t, ts.sock)
		start := time.Now()
		if !rc.closed() {
			t.Error("not closed")
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("closed after %v, handshake timeout 300ms", d)
		}
	})
	t.Run("case=export-name-unknown", func(t *testing.T) {
		rc := dialRaw(t, ts.sock)
		rc.clientFlags(nbdproto.ClientFixedNewstyle)
		rc.option(nbdproto.OptExportName, []byte("nope"))
		if !rc.closed() {
			t.Error("not closed")
		}
	})
	t.Run("case=export-name", func(t *testing.T) {
		rc := dialRaw(t, ts.sock)
		rc.clientFlags(nbdproto.ClientFixedNewstyle)
		rc.option(nbdproto.OptExportName, []byte("disk"))
		var r [134]byte
		rc.readFull(r[:])
		if binary.BigEndian.Uint64(r[:]) != 1<<20 || !bytes.Equal(r[10:], make([]byte, 124)) {
			t.Errorf("export name reply % x", r[:12])
		}
	})
}

// TestConnectionLimit: an export refuses connections beyond its maximum,
// with NBD_REP_ERR_POLICY, and takes them again once one closes.
func TestConnectionLimit(t *testing.T) {
	dir := t.TempDir()
	tv := newTestVolume(t, dir, 1<<20, "512+8")
	ts := startServer(t, dir, []Export{{Name: "disk", Volume: tv.vol}}, Options{MaxConnections: 1})
	a := dialRaw(t, ts.sock)
	a.clientFlags(nbdproto.ClientFixedNewstyle)
	a.goExport("disk", false)
	b := dialRaw(t, ts.sock)
	b.clientFlags(nbdproto.ClientFixedNewstyle)
	b.option(nbdproto.OptGo, append(append(u32(4), "disk"...), 0, 0))
	for {
		_, typ, _ := b.optReply()
		if typ == nbdproto.RepInfo {
			continue
		}
		if typ != nbdproto.RepErrPolicy {
			t.Fatalf("second connection: reply %#x, want NBD_REP_ERR_POLICY", typ)
		}
		break
	}
	a.request(nbdproto.CmdDisc, 0, 0, 0, 0, nil)
	a.closed()
	time.Sleep(100 * time.Millisecond)
	b.goExport("disk", false)
}

// TestTransmissionErrors: requests real clients do not send get the
// protocol's error, and the connection stays usable.
func TestTransmissionErrors(t *testing.T) {
	dir := t.TempDir()
	tv := newTestVolume(t, dir, 1<<20, "4096+8")
	ts := startServer(t, dir, []Export{{Name: "disk", Volume: tv.vol}, {Name: "ro", Volume: tv.vol, ReadOnly: true}},
		Options{MaxPayload: 1 << 20})
	for _, structured := range []bool{false, true} {
		rc := dialRaw(t, ts.sock)
		rc.clientFlags(nbdproto.ClientFixedNewstyle | nbdproto.ClientNoZeroes)
		size, flags := rc.goExport("disk", structured)
		want := uint16(nbdproto.FlagHasFlags | nbdproto.FlagSendFlush | nbdproto.FlagSendFUA | nbdproto.FlagSendTrim | nbdproto.FlagSendWriteZeroes | nbdproto.FlagSendFastZero | nbdproto.FlagCanMultiConn)
		if size != 1<<20 || flags != want {
			t.Fatalf("size %d flags %#x, want %#x", size, flags, want)
		}
		tests := []struct {
			name        string
			typ, flags  uint16
			off         uint64
			length      uint32
			payload     []byte
			want        uint32
			readPayload int
		}{
			{"read-beyond", nbdproto.CmdRead, 0, 1<<20 - 512, 1024, nil, nbdproto.ErrnoInval, 0},
			{"read-offset-overflow", nbdproto.CmdRead, 0, 1 << 63, 512, nil, nbdproto.ErrnoInval, 0},
			{"read-too-long", nbdproto.CmdRead, 0, 0, 2 << 20, nil, nbdproto.ErrnoInval, 0},
			{"write-beyond", nbdproto.CmdWrite, 0, 1 << 20, 512, make([]byte, 512), nbdproto.ErrnoNoSpc, 0},
			{"zero-beyond", nbdproto.CmdWriteZeroes, 0, 1<<20 - 512, 4096, nil, nbdproto.ErrnoNoSpc, 0},
			{"trim-beyond", nbdproto.CmdTrim, 0, 1 << 20, 1, nil, nbdproto.ErrnoInval, 0},
			{"unknown-command", 42, 0, 0, 0, nil, nbdproto.ErrnoInval, 0},
			{"cache", nbdproto.CmdCache, 0, 0, 512, nil, nbdproto.ErrnoInval, 0},
			{"bad-flag", nbdproto.CmdRead, 1 << 9, 0, 512, nil, nbdproto.ErrnoInval, 0},
			{"df-not-advertised", nbdproto.CmdRead, nbdproto.CmdFlagDF, 0, 512, nil, nbdproto.ErrnoInval, 0},
			{"flush-with-length", nbdproto.CmdFlush, 0, 0, 1, nil, nbdproto.ErrnoInval, 0},
			{"block-status-zero", nbdproto.CmdBlockStatus, 0, 0, 0, nil, nbdproto.ErrnoInval, 0},
			{"fast-zero-no-hole", nbdproto.CmdWriteZeroes, nbdproto.CmdFlagFastZero | nbdproto.CmdFlagNoHole, 0, 4096, nil, nbdproto.ErrnoNotSup, 0},
			{"read-ok", nbdproto.CmdRead, 0, 4096, 4096, nil, 0, 4096},
			{"flush-ok", nbdproto.CmdFlush, nbdproto.CmdFlagFUA, 0, 0, nil, 0, 0},
		}
		if !structured {
			tests = append(tests, struct {
				name        string
				typ, flags  uint16
				off         uint64
				length      uint32
				payload     []byte
				want        uint32
				readPayload int
			}{"block-status-unnegotiated", nbdproto.CmdBlockStatus, 0, 0, 4096, nil, nbdproto.ErrnoInval, 0})
		}
		for i, tt := range tests {
			t.Run("structured="+map[bool]string{false: "no", true: "yes"}[structured]+"/req="+tt.name, func(t *testing.T) {
				rc.t = t
				rc.request(tt.typ, tt.flags, uint64(i)+100, tt.off, tt.length, tt.payload)
				r := rc.readReply(tt.readPayload)
				if r.cookie != uint64(i)+100 {
					t.Fatalf("cookie %d, want %d", r.cookie, i+100)
				}
				got := r.err
				if r.structured {
					switch {
					case r.typ == nbdproto.ChunkError:
						got = binary.BigEndian.Uint32(r.payload)
					case r.typ == nbdproto.ChunkOffsetData && tt.typ == nbdproto.CmdRead:
						got = 0
					case r.typ == nbdproto.ChunkNone:
						got = 0
					default:
						t.Fatalf("chunk type %#x", r.typ)
					}
					if r.flags&nbdproto.ReplyFlagDone == 0 {
						t.Errorf("chunk without DONE")
					}
				}
				if got != tt.want {
					t.Errorf("error %d, want %d", got, tt.want)
				}
			})
		}
		rc.t = t
		rc.request(nbdproto.CmdDisc, 0, 0, 0, 0, nil)
		if !rc.closed() {
			t.Error("connection open after NBD_CMD_DISC")
		}
	}
	// The read-only export refuses writes with EPERM.
	rc := dialRaw(t, ts.sock)
	rc.clientFlags(nbdproto.ClientFixedNewstyle)
	if _, flags := rc.goExport("ro", false); flags&nbdproto.FlagReadOnly == 0 {
		t.Errorf("read-only export flags %#x", flags)
	}
	for _, typ := range []uint16{nbdproto.CmdWrite, nbdproto.CmdTrim, nbdproto.CmdWriteZeroes} {
		var p []byte
		if typ == nbdproto.CmdWrite {
			p = make([]byte, 512)
		}
		rc.request(typ, 0, 7, 0, 512, p)
		if r := rc.readReply(0); r.err != nbdproto.ErrnoPerm {
			t.Errorf("command %d on a read-only export: error %d, want EPERM", typ, r.err)
		}
	}
}

// TestOversizedWrite: a write longer than the maximum payload is refused
// with EINVAL without its length being allocated, and the connection goes
// on; nothing of it reaches the volume.
func TestOversizedWrite(t *testing.T) {
	dir := t.TempDir()
	tv := newTestVolume(t, dir, 1<<20, "4096+8")
	ts := startServer(t, dir, []Export{{Name: "disk", Volume: tv.vol}}, Options{MaxPayload: 1 << 20})
	rc := dialRaw(t, ts.sock)
	rc.clientFlags(nbdproto.ClientFixedNewstyle)
	rc.goExport("disk", false)
	const length = 256 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rc.c.Write(bytes.Join([][]byte{u32(nbdproto.MagicRequest), u16(0), u16(nbdproto.CmdWrite), u64(1), u64(0), u32(length)}, nil))
		chunk := bytes.Repeat([]byte{0xee}, 1<<20)
		for range length / len(chunk) {
			if _, err := rc.c.Write(chunk); err != nil {
				return
			}
		}
	}()
	r := rc.readReply(0)
	wg.Wait()
	runtime.ReadMemStats(&after)
	if r.err != nbdproto.ErrnoInval {
		t.Errorf("oversized write: error %d, want EINVAL", r.err)
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > length/8 {
		t.Errorf("refusing a %d-byte write allocated %d bytes", length, d)
	}
	rc.request(nbdproto.CmdRead, 0, 2, 0, 4096, nil)
	if r := rc.readReply(4096); r.err != 0 || !bytes.Equal(r.payload, make([]byte, 4096)) {
		t.Errorf("read after the refused write: error %d, data changed: %v", r.err, !bytes.Equal(r.payload, make([]byte, 4096)))
	}
}

// TestHostileClientIsolated: a client that breaks the protocol in the
// middle of a write loses its connection, the partial write is not
// executed, and another client's requests go on.
func TestHostileClientIsolated(t *testing.T) {
	dir := t.TempDir()
	tv := newTestVolume(t, dir, 1<<20, "4096+8")
	ts := startServer(t, dir, []Export{{Name: "disk", Volume: tv.vol}}, Options{})
	good := dialRaw(t, ts.sock)
	good.clientFlags(nbdproto.ClientFixedNewstyle)
	good.goExport("disk", true)
	bad := dialRaw(t, ts.sock)
	bad.clientFlags(nbdproto.ClientFixedNewstyle)
	bad.goExport("disk", false)
	// Half a write, then the connection closes.
	bad.request(nbdproto.CmdWrite, 0, 1, 0, 8192, bytes.Repeat([]byte{0x55}, 4096))
	bad.c.Close()
	// A bad magic on a third connection.
	third := dialRaw(t, ts.sock)
	third.clientFlags(nbdproto.ClientFixedNewstyle)
	third.goExport("disk", false)
	third.write(bytes.Repeat([]byte{0xff}, nbdproto.RequestSize))
	if !third.closed() {
		t.Error("connection with a bad request magic still open")
	}
	good.request(nbdproto.CmdRead, 0, 9, 0, 8192, nil)
	r := good.readReply(0)
	if r.typ != nbdproto.ChunkOffsetData || !bytes.Equal(r.payload[8:], make([]byte, 8192)) {
		t.Errorf("read after a hostile client: chunk %#x, %d bytes; the partial write must not land", r.typ, len(r.payload))
	}
}

// TestBlockStatusSeesUnflushedWrites: a write that was answered but not
// flushed shows as data in BLOCK_STATUS (a client copying the export
// skips holes: reporting it as a hole would lose it), and a trim as a
// hole at once.
func TestBlockStatusSeesUnflushedWrites(t *testing.T) {
	dir := t.TempDir()
	tv := newTestVolume(t, dir, 1<<20, "4096+8")
	ts := startServer(t, dir, []Export{{Name: "disk", Volume: tv.vol}}, Options{})
	rc := dialRaw(t, ts.sock)
	rc.clientFlags(nbdproto.ClientFixedNewstyle)
	rc.goExport("disk", true)
	status := func() [][2]uint32 {
		t.Helper()
		rc.request(nbdproto.CmdBlockStatus, 0, 5, 0, 1<<20, nil)
		r := rc.readReply(0)
		if r.typ != nbdproto.ChunkBlockStatus || r.flags&nbdproto.ReplyFlagDone == 0 || binary.BigEndian.Uint32(r.payload) != nbdproto.MetaBaseID {
			t.Fatalf("block status reply: type %#x flags %#x", r.typ, r.flags)
		}
		var out [][2]uint32
		for p := r.payload[4:]; len(p) >= 8; p = p[8:] {
			out = append(out, [2]uint32{binary.BigEndian.Uint32(p), binary.BigEndian.Uint32(p[4:])})
		}
		return out
	}
	if got := status(); len(got) != 1 || got[0] != [2]uint32{1 << 20, nbdproto.StateHole | nbdproto.StateZero} {
		t.Errorf("fresh volume: %v", got)
	}
	rc.request(nbdproto.CmdWrite, 0, 6, 8192, 4096, bytes.Repeat([]byte{1}, 4096))
	if r := rc.readReply(0); r.err != 0 {
		t.Fatalf("write: %d", r.err)
	}
	want := [][2]uint32{{8192, 3}, {4096, 0}, {1<<20 - 12288, 3}}
	if got := status(); !equalExtents(got, want) {
		t.Errorf("after an unflushed write: %v, want %v", got, want)
	}
	rc.request(nbdproto.CmdTrim, 0, 7, 8192, 4096, nil)
	if r := rc.readReply(0); r.err != 0 {
		t.Fatalf("trim: %d", r.err)
	}
	if got := status(); len(got) != 1 || got[0] != [2]uint32{1 << 20, 3} {
		t.Errorf("after the trim: %v", got)
	}
	// REQ_ONE: one extent.
	rc.request(nbdproto.CmdWrite, 0, 6, 0, 4096, bytes.Repeat([]byte{1}, 4096))
	rc.readReply(0)
	rc.request(nbdproto.CmdBlockStatus, nbdproto.CmdFlagReqOne, 8, 0, 1<<20, nil)
	if r := rc.readReply(0); len(r.payload) != 12 || binary.BigEndian.Uint32(r.payload[4:]) != 4096 {
		t.Errorf("REQ_ONE reply % x", r.payload)
	}
}

func equalExtents(a, b [][2]uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestFlushDurable: over a device that loses every write not covered by a
// completed sync when it crashes (blockdev/faultdev), what a FLUSH or a
// FUA write acknowledged survives the crash and verifies; an unflushed
// write may be lost but leaves no failing block.
func TestFlushDurable(t *testing.T) {
	for _, how := range []string{"flush", "fua"} {
		t.Run("ack="+how, func(t *testing.T) {
			mem, err := device.NewMem(1<<20, 512)
			if err != nil {
				t.Fatal(err)
			}
			fd, err := faultdev.New(mem, faultdev.Options{})
			if err != nil {
				t.Fatal(err)
			}
			kv, err := store.Open("mem:")
			if err != nil {
				t.Fatal(err)
			}
			vol, err := blockdev.Create(context.Background(), fd, kv, blockdev.CreateOptions{Format: dif.MustFormat("4096+8")})
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			ts := startServer(t, dir, []Export{{Name: "disk", Volume: vol}}, Options{})
			rc := dialRaw(t, ts.sock)
			rc.clientFlags(nbdproto.ClientFixedNewstyle)
			rc.goExport("disk", false)
			a := bytes.Repeat([]byte{0xa1}, 8192)
			if how == "fua" {
				rc.request(nbdproto.CmdWrite, nbdproto.CmdFlagFUA, 1, 4096, 8192, a)
				if r := rc.readReply(0); r.err != 0 {
					t.Fatal(r.err)
				}
			} else {
				rc.request(nbdproto.CmdWrite, 0, 1, 4096, 8192, a)
				rc.readReply(0)
				rc.request(nbdproto.CmdFlush, 0, 2, 0, 0, nil)
				if r := rc.readReply(0); r.err != 0 {
					t.Fatal(r.err)
				}
			}
			rc.request(nbdproto.CmdWrite, 0, 3, 65536, 4096, bytes.Repeat([]byte{0xb2}, 4096))
			rc.readReply(0)
			if err := fd.Crash(faultdev.CrashOptions{}); err != nil {
				t.Fatal(err)
			}
			ts.stop(t)
			vol.Close()
			fd2, err := fd.Reopen()
			if err != nil {
				t.Fatal(err)
			}
			vol2, err := blockdev.Open(context.Background(), fd2, kv, blockdev.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer vol2.Close()
			got := make([]byte, 8192)
			if _, err := vol2.ReadAt(got, 4096); err != nil || !bytes.Equal(got, a) {
				t.Errorf("acknowledged write after the crash: %v, intact %v", err, bytes.Equal(got, a))
			}
			if _, err := vol2.ReadAt(got[:4096], 65536); err != nil {
				t.Errorf("unflushed write's block fails after the crash: %v", err)
			}
		})
	}
}

// TestShutdown: cancelling Serve's context answers the requests already
// read, then closes every connection (idle ones and ones negotiating) and
// returns promptly; the volume stays open for the caller.
func TestShutdown(t *testing.T) {
	dir := t.TempDir()
	tv := newTestVolume(t, dir, 1<<20, "4096+8")
	ts := startServer(t, dir, []Export{{Name: "disk", Volume: tv.vol}}, Options{})
	busy := dialRaw(t, ts.sock)
	busy.clientFlags(nbdproto.ClientFixedNewstyle)
	busy.goExport("disk", false)
	idle := dialRaw(t, ts.sock)
	idle.clientFlags(nbdproto.ClientFixedNewstyle)
	idle.goExport("disk", false)
	nego := dialRaw(t, ts.sock)
	for i := range 8 {
		busy.request(nbdproto.CmdWrite, 0, uint64(i), uint64(i)*65536, 65536, bytes.Repeat([]byte{byte(i + 1)}, 65536))
	}
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	ts.stop(t)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Serve took %v to return", d)
	}
	got := map[uint64]uint32{}
	for range 8 {
		r := busy.readReply(0)
		got[r.cookie] = r.err
	}
	for i := range 8 {
		if e, ok := got[uint64(i)]; !ok || e != 0 {
			t.Errorf("write %d: answered %v, error %d", i, ok, e)
		}
	}
	for name, rc := range map[string]*rawClient{"busy": busy, "idle": idle, "negotiating": nego} {
		if !rc.closed() {
			t.Errorf("%s connection still open after the shutdown", name)
		}
	}
	buf := make([]byte, 65536)
	if _, err := tv.vol.ReadAt(buf, 7*65536); err != nil || buf[0] != 8 {
		t.Errorf("volume after the shutdown: %v, %d", err, buf[0])
	}
}
