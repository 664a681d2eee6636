package nbdclient

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/nbd"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// TestVolumeOnNBD protects an NBD export: a blockdev.Volume on the device
// writes, reads verified, discards and reopens; a block changed behind the
// volume (through a second connection) fails verification; and when the
// server goes away a check stops with the device's end instead of
// reporting the blocks it could not read.
func TestVolumeOnNBD(t *testing.T) {
	const size = 4 << 20
	for _, backend := range []string{"repo-server", "qemu-nbd"} {
		t.Run("server="+backend, func(t *testing.T) {
			var url string
			var stop func()
			switch backend {
			case "repo-server":
				rs := startRepoServer(t, size, false, nbd.Options{})
				url, stop = rs.unixURL("disk"), rs.stop
			case "qemu-nbd":
				need(t, "qemu-nbd")
				dir := t.TempDir()
				img := filepath.Join(dir, "disk.img")
				if err := os.WriteFile(img, make([]byte, size), 0o600); err != nil {
					t.Fatal(err)
				}
				sock := filepath.Join(dir, "qemu.sock")
				startProcess(t, sock, "qemu-nbd", "-f", "raw", "-x", "disk", "-k", sock, "-t", "-e", "4", img)
				url = "nbd+unix:///disk?socket=" + sock
			}
			ctx := context.Background()
			dev := open(t, url, Options{})
			kv := store.NewMem()
			defer kv.Close()
			vol, err := blockdev.Create(ctx, dev, kv, blockdev.CreateOptions{Format: dif.MustFormat("4096+8")})
			if err != nil {
				t.Fatal(err)
			}
			p := pattern(1<<20, 21)
			if _, err := vol.WriteAt(p, 64<<10); err != nil {
				t.Fatal(err)
			}
			if err := vol.Discard(64<<10, 8192); err != nil {
				t.Fatal(err)
			}
			clear(p[:8192])
			if err := vol.Close(); err != nil {
				t.Fatal(err)
			}
			if vol, err = blockdev.Open(ctx, dev, kv, blockdev.Options{}); err != nil {
				t.Fatal(err)
			}
			defer vol.Close()
			got := make([]byte, len(p))
			if _, err := vol.ReadAt(got, 64<<10); err != nil || !bytes.Equal(got, p) {
				t.Fatalf("verified read: %v, equal %v", err, bytes.Equal(got, p))
			}

			// Behind the volume's back, through a second connection.
			other := open(t, url, Options{})
			if _, err := other.WriteAt(bytes.Repeat([]byte{0x5a}, 512), 128<<10); err != nil {
				t.Fatal(err)
			}
			if err := other.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := vol.ReadAt(got[:4096], 128<<10); !errors.Is(err, dif.ErrIntegrity) {
				t.Fatalf("read of a block changed behind the volume: %v, want dif.ErrIntegrity", err)
			}

			if stop == nil {
				return
			}
			stop()
			var problems []blockdev.Problem
			scratch := make([]byte, vol.ScratchSize(64))
			_, err = vol.CheckRun(ctx, 0, 64, scratch, blockdev.CheckOptions{}, func(p blockdev.Problem) { problems = append(problems, p) })
			if !errors.Is(err, device.ErrClosed) || !errors.Is(err, ErrDisconnected) {
				t.Errorf("check after the server went away: %v, want the device's end", err)
			}
			for _, p := range problems {
				if p.Kind == blockdev.KindIO {
					t.Errorf("a block reported unreadable because the connection ended: %+v", p)
				}
			}
		})
	}
}
