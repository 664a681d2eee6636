package nbd

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// gatedDevice holds every read while closed, counting the reads it holds
// and the most it held at once. It embeds only blockdev.Device, so the
// volume finds no holes and no mapping: every read of the volume reaches
// ReadAt.
type gatedDevice struct {
	blockdev.Device
	closed       atomic.Bool
	open         chan struct{}
	inside, peak atomic.Int64
}

func (d *gatedDevice) ReadAt(p []byte, off int64) (int, error) {
	if d.closed.Load() {
		n := d.inside.Add(1)
		for {
			old := d.peak.Load()
			if n <= old || d.peak.CompareAndSwap(old, n) {
				break
			}
		}
		<-d.open
		d.inside.Add(-1)
	}
	return d.Device.ReadAt(p, off)
}

// TestInFlightBound: a client that sends many requests without reading a
// reply gets at most MaxInFlight of them served at once; the rest wait on
// the wire, and all are answered once the volume moves again.
func TestInFlightBound(t *testing.T) {
	const maxInFlight, requests = 4, 12
	mem, err := blockdev.NewMemDevice(1<<20, 512)
	if err != nil {
		t.Fatal(err)
	}
	dev := &gatedDevice{Device: mem, open: make(chan struct{})}
	kv, err := store.Open("mem:")
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	vol, err := blockdev.Create(context.Background(), dev, kv, blockdev.CreateOptions{Format: dif.MustFormat("4096+8")})
	if err != nil {
		t.Fatal(err)
	}
	defer vol.Close()
	ts := startServer(t, t.TempDir(), []Export{{Name: "disk", Volume: vol}}, Options{MaxInFlight: maxInFlight})
	rc := dialRaw(t, ts.sock)
	rc.clientFlags(clientFixedNewstyle)
	rc.goExport("disk", false)

	dev.closed.Store(true)
	released := false
	release := func() {
		if !released {
			released = true
			close(dev.open)
		}
	}
	defer release()
	for i := range requests {
		rc.request(cmdRead, 0, uint64(i), uint64(i)*4096, 4096, nil)
	}
	deadline := time.Now().Add(20 * time.Second)
	for dev.inside.Load() < maxInFlight && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // time for any request beyond the bound to start
	if in, peak := dev.inside.Load(), dev.peak.Load(); in != maxInFlight || peak != maxInFlight {
		t.Errorf("reads held at once: %d (at most %d), want %d", in, peak, maxInFlight)
	}
	release()
	for range requests {
		if r := rc.readReply(4096); r.err != 0 {
			t.Fatalf("reply %d: error %d", r.cookie, r.err)
		}
	}
	if peak := dev.peak.Load(); peak > maxInFlight {
		t.Errorf("%d requests served at once, above MaxInFlight %d", peak, maxInFlight)
	}
}
