package nbd

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev/internal/nbdproto"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// fuzzServer is one server over an in-memory volume, shared by the fuzz
// inputs.
var fuzzServer = sync.OnceValues(func() (*Server, error) {
	dev, err := device.NewMem(1<<20, 512)
	if err != nil {
		return nil, err
	}
	kv, err := store.Open("mem:")
	if err != nil {
		return nil, err
	}
	vol, err := blockdev.Create(context.Background(), dev, kv, blockdev.CreateOptions{Format: dif.MustFormat("4096+8")})
	if err != nil {
		return nil, err
	}
	return NewServer([]Export{{Name: "disk", Volume: vol}, {Name: "ro", Volume: vol, ReadOnly: true}},
		Options{MaxPayload: 1 << 20, MaxInFlight: 4, HandshakeTimeout: 2 * time.Second, DrainTimeout: 2 * time.Second})
})

// clientBytes builds a client stream: flags, options, then requests.
func clientBytes(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func opt(o uint32, data []byte) []byte {
	return clientBytes(u64(nbdproto.MagicOpt), u32(o), u32(uint32(len(data))), data)
}

func req(typ, flags uint16, off uint64, length uint32, payload []byte) []byte {
	return clientBytes(u32(nbdproto.MagicRequest), u16(flags), u16(typ), u64(7), u64(off), u32(length), payload)
}

// FuzzServer feeds arbitrary bytes to a connection, through the handshake
// and the transmission phase: the server must neither panic (a recovered
// panic is reported as an internal error) nor hang, and must close the
// connection once the input ends.
func FuzzServer(f *testing.F) {
	name := []byte("disk")
	gop := opt(nbdproto.OptGo, clientBytes(u32(4), name, u16(1), u16(nbdproto.InfoBlockSize)))
	meta := opt(nbdproto.OptSetMetaCtx, clientBytes(u32(4), name, u32(1), u32(15), []byte(nbdproto.MetaBaseAllocation)))
	flags := u32(nbdproto.ClientFixedNewstyle | nbdproto.ClientNoZeroes)
	f.Add(clientBytes(flags, opt(nbdproto.OptList, nil), opt(nbdproto.OptAbort, nil)))
	f.Add(clientBytes(flags, opt(nbdproto.OptStructured, nil), meta, gop,
		req(nbdproto.CmdWrite, nbdproto.CmdFlagFUA, 1000, 600, bytes.Repeat([]byte{1}, 600)),
		req(nbdproto.CmdRead, 0, 512, 4096, nil), req(nbdproto.CmdBlockStatus, nbdproto.CmdFlagReqOne, 0, 1<<20, nil),
		req(nbdproto.CmdWriteZeroes, nbdproto.CmdFlagNoHole, 4096, 8192, nil), req(nbdproto.CmdTrim, 0, 100, 9000, nil),
		req(nbdproto.CmdFlush, 0, 0, 0, nil), req(nbdproto.CmdDisc, 0, 0, 0, nil)))
	f.Add(clientBytes(flags, gop, req(nbdproto.CmdWrite, 0, 0, 1<<30, nil)))
	f.Add(clientBytes(flags, opt(nbdproto.OptExportName, []byte("ro")), req(nbdproto.CmdWrite, 0, 0, 512, make([]byte, 512)), req(nbdproto.CmdRead, 0, 0, 512, nil)))
	f.Add(clientBytes(flags, opt(nbdproto.OptInfo, []byte{0, 0, 0, 9, 0}), opt(nbdproto.OptListMetaCtx, clientBytes(u32(4), name, u32(0)))))
	f.Fuzz(func(t *testing.T, in []byte) {
		srv, err := fuzzServer()
		if err != nil {
			t.Fatal(err)
		}
		a, b := net.Pipe()
		done := make(chan error, 1)
		go func() { done <- newConn(srv, a).serve(context.Background()) }()
		go func() {
			// Write returns once the server has read everything (the
			// pipe is synchronous); then the client hangs up.
			b.Write(in)
			b.Close()
		}()
		go io.Copy(io.Discard, b)
		select {
		case err := <-done:
			if errors.Is(err, errInternal) {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			stacks := make([]byte, 1<<20)
			stacks = stacks[:runtime.Stack(stacks, true)]
			t.Fatalf("connection still served 10 s after its input ended:\n%s", stacks)
		}
	})
}
