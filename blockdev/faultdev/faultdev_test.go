package faultdev

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
)

// newFault returns a fault device over a memory device of size bytes and
// block size bs, filled with blocktest.Pattern(size, 0) and synced.
func newFault(t testing.TB, size int64, bs, sector int) (*Device, *device.Mem, []byte) {
	t.Helper()
	m, err := device.NewMem(size, bs)
	if err != nil {
		t.Fatal(err)
	}
	init := blocktest.Pattern(int(size), 0)
	if _, err := m.WriteAt(init, 0); err != nil {
		t.Fatal(err)
	}
	d, err := New(m, Options{Sector: sector})
	if err != nil {
		t.Fatal(err)
	}
	return d, m, init
}

func mustRead(t testing.TB, d device.Device, off int64, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := d.ReadAt(b, off); err != nil {
		t.Fatalf("ReadAt(%d, %d): %v", off, n, err)
	}
	return b
}

func mustInject(t testing.TB, d *Device, f Fault) int {
	t.Helper()
	id, err := d.Inject(f)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func isEIO(err error) bool {
	var ioe *device.IOError
	return errors.As(err, &ioe) && errors.Is(err, syscall.EIO)
}

func TestFaultFailRead(t *testing.T) {
	for _, c := range []struct {
		name         string
		after, times int
		want         []bool // per read of the faulty range: fails?
	}{
		{"transient", 0, 2, []bool{true, true, false, false}},
		{"permanent", 0, 0, []bool{true, true, true, true}},
		{"after", 1, 1, []bool{false, true, false, false}},
	} {
		t.Run("mode="+c.name, func(t *testing.T) {
			d, _, init := newFault(t, 64<<10, 512, 0)
			id := mustInject(t, d, Fault{Kind: FailRead, Off: 4096, Len: 512, After: c.after, Times: c.times})
			// Reads outside the range are not affected and do not count.
			if got := mustRead(t, d, 0, 4096); !bytes.Equal(got, init[:4096]) {
				t.Fatal("read outside the fault range differs")
			}
			hits := 0
			for i, fail := range c.want {
				b := make([]byte, 1024)
				_, err := d.ReadAt(b, 3584+int64(i%2)*512) // overlaps the range
				if fail != (err != nil) {
					t.Fatalf("read %d: %v, want failure %v", i, err, fail)
				}
				if fail {
					hits++
					if !isEIO(err) {
						t.Fatalf("read %d: %v, want *device.IOError wrapping EIO", i, err)
					}
				} else if !bytes.Equal(b, init[3584+(i%2)*512:][:1024]) {
					t.Fatalf("read %d returned wrong data", i)
				}
			}
			if d.Hits(id) != hits {
				t.Fatalf("Hits %d, want %d", d.Hits(id), hits)
			}
		})
	}
}

func TestFaultWrites(t *testing.T) {
	const size = 64 << 10
	w := bytes.Repeat([]byte{0xEE}, 4*4096)
	for _, c := range []struct {
		name   string
		fault  Fault
		err    bool
		expect func(init []byte) []byte // device contents expected afterwards
	}{
		{"none", Fault{Kind: FailWrite, Off: 60000, Len: 1}, false, func(b []byte) []byte {
			copy(b[8192:], w)
			return b
		}},
		{"fail", Fault{Kind: FailWrite, Off: 8192 + 4096, Len: 1}, true, func(b []byte) []byte { return b }},
		{"drop", Fault{Kind: DropWrite}, false, func(b []byte) []byte { return b }},
		{"tear-blocks", Fault{Kind: TearWrite, Keep: 2 * 4096}, false, func(b []byte) []byte {
			copy(b[8192:], w[:2*4096])
			return b
		}},
		{"tear-sectors", Fault{Kind: TearWrite, Keep: 3 * 512}, false, func(b []byte) []byte {
			copy(b[8192:], w[:3*512])
			return b
		}},
		{"tear-nothing", Fault{Kind: TearWrite, Keep: 0}, false, func(b []byte) []byte { return b }},
		{"misdirect", Fault{Kind: MisdirectWrite, Target: 40960}, false, func(b []byte) []byte {
			copy(b[40960:], w)
			return b
		}},
		{"misdirect-clipped", Fault{Kind: MisdirectWrite, Target: size - 4096}, false, func(b []byte) []byte {
			copy(b[size-4096:], w)
			return b
		}},
	} {
		t.Run("fault="+c.name, func(t *testing.T) {
			d, _, init := newFault(t, size, 4096, 512)
			id := mustInject(t, d, c.fault)
			n, err := d.WriteAt(w, 8192)
			if c.err {
				if !isEIO(err) || n != 0 {
					t.Fatalf("WriteAt: %d, %v; want 0, EIO", n, err)
				}
			} else if err != nil || n != len(w) {
				t.Fatalf("WriteAt: %d, %v; want silent success", n, err)
			}
			want := c.expect(bytes.Clone(init))
			if got := mustRead(t, d, 0, size); !bytes.Equal(got, want) {
				t.Fatal("device contents differ from the expected outcome of the fault")
			}
			if c.name != "none" && d.Hits(id) != 1 {
				t.Fatalf("Hits %d, want 1", d.Hits(id))
			}
		})
	}
}

func TestFaultCorruptReadAndFlipBit(t *testing.T) {
	d, m, init := newFault(t, 16<<10, 512, 0)
	bit := int64(1000*8 + 3)
	mustInject(t, d, Fault{Kind: CorruptRead, Bit: bit, Times: 1})
	got := mustRead(t, d, 512, 1024)
	want := bytes.Clone(init[512:1536])
	want[1000-512] ^= 1 << 3
	if !bytes.Equal(got, want) {
		t.Fatal("first read not corrupted as scripted")
	}
	if got := mustRead(t, d, 512, 1024); !bytes.Equal(got, init[512:1536]) {
		t.Fatal("transient corruption persisted")
	}
	if got := mustRead(t, m, 0, 16<<10); !bytes.Equal(got, init) {
		t.Fatal("CorruptRead changed the medium")
	}
	// FlipBit changes the medium, survives a crash, and is overwritten by a
	// later write.
	if err := d.FlipBit(2000, 7); err != nil {
		t.Fatal(err)
	}
	if _, err := d.WriteAt(make([]byte, 512), 1536); err != nil { // the same sector, unsynced
		t.Fatal(err)
	}
	if err := d.Crash(CrashOptions{}); err != nil {
		t.Fatal(err)
	}
	want = bytes.Clone(init)
	want[2000] ^= 1 << 7
	if got := mustRead(t, m, 0, 16<<10); !bytes.Equal(got, want) {
		t.Fatal("after crash: the flipped bit must stay and the unsynced write must be gone")
	}
	for _, c := range []struct {
		off int64
		bit uint
	}{{-1, 0}, {16 << 10, 0}, {0, 8}} {
		d2, _, _ := newFault(t, 16<<10, 512, 0)
		if err := d2.FlipBit(c.off, c.bit); err == nil {
			t.Errorf("FlipBit(%d, %d) succeeded", c.off, c.bit)
		}
	}
}

func TestFaultSync(t *testing.T) {
	d, m, init := newFault(t, 16<<10, 512, 0)
	mustInject(t, d, Fault{Kind: FailSync, Times: 1})
	if _, err := d.WriteAt(bytes.Repeat([]byte{1}, 512), 0); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); !isEIO(err) {
		t.Fatalf("Sync: %v, want EIO", err)
	}
	if d.Unsynced() != 1 {
		t.Fatalf("Unsynced %d after a failed sync, want 1", d.Unsynced())
	}
	if err := d.Crash(CrashOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, m, 0, 512); !bytes.Equal(got, init[:512]) {
		t.Fatal("a write covered only by a failed sync survived the crash")
	}
}

func TestFaultInjectErrors(t *testing.T) {
	d, _, _ := newFault(t, 16<<10, 4096, 0)
	for _, f := range []Fault{
		{},
		{Kind: 99},
		{Kind: FailRead, Off: -1},
		{Kind: FailRead, Times: -1},
		{Kind: TearWrite, Keep: 100},
		{Kind: MisdirectWrite, Target: 16 << 10},
		{Kind: MisdirectWrite, Target: -4096},
		{Kind: CorruptRead, Bit: 16 << 13},
	} {
		if _, err := d.Inject(f); err == nil {
			t.Errorf("Inject(%+v) succeeded", f)
		}
	}
	for _, s := range []int{256, 768, 8192} {
		m, _ := device.NewMem(4096, 4096)
		if _, err := New(m, Options{Sector: s}); err == nil {
			t.Errorf("New(sector=%d) succeeded", s)
		}
	}
}

func TestFaultClear(t *testing.T) {
	d, _, _ := newFault(t, 16<<10, 512, 0)
	mustInject(t, d, Fault{Kind: FailRead})
	mustInject(t, d, Fault{Kind: FailWrite})
	d.ClearFaults()
	if _, err := d.ReadAt(make([]byte, 512), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := d.WriteAt(make([]byte, 512), 0); err != nil {
		t.Fatal(err)
	}
}

// TestFaultConcurrent runs writers and readers on disjoint ranges at once
// (meaningful under -race).
func TestFaultConcurrent(t *testing.T) {
	const workers, per = 4, 16 << 10
	d, _, _ := newFault(t, workers*per, 512, 0)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			p := blocktest.Pattern(per, uint64(w)+100)
			for i := 0; i < per; i += 4096 {
				if _, err := d.WriteAt(p[i:i+4096], int64(w*per+i)); err != nil {
					t.Error(err)
				}
				if _, err := d.ReadAt(make([]byte, 4096), int64(w*per+i)); err != nil {
					t.Error(err)
				}
				if i == per/2 {
					if err := d.Sync(); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	for w := range workers {
		if got := mustRead(t, d, int64(w*per), per); !bytes.Equal(got, blocktest.Pattern(per, uint64(w)+100)) {
			t.Fatalf("worker %d: contents differ", w)
		}
	}
	if got := d.Steps(); got != workers*(per/4096+1) {
		t.Fatalf("Steps %d, want %d", got, workers*(per/4096+1))
	}
}

func ExampleDevice() {
	m, _ := device.NewMem(1<<20, 4096)
	d, _ := New(m, Options{})
	d.WriteAt(bytes.Repeat([]byte("A"), 4096), 0)
	d.Sync()
	d.WriteAt(bytes.Repeat([]byte("B"), 4096), 0)
	d.Crash(CrashOptions{}) // lose everything not synced
	d, _ = d.Reopen()
	b := make([]byte, 1)
	d.ReadAt(b, 0)
	fmt.Println(string(b))
	// Output: A
}
