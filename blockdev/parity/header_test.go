package parity

import (
	"errors"
	"testing"

	"github.com/difctl/difctl/blockdev/device"
)

// TestHeader: a parity file's header is accepted for its own identity and
// layout only; another identity, layout or damaged header is refused with
// ErrForeign, as is a device too small to hold it.
func TestHeader(t *testing.T) {
	l, err := NewLayout(Options{Data: 4, Parity: 2, BlockSize: 512, Blocks: 100, Depth: 3})
	if err != nil {
		t.Fatal(err)
	}
	mem, err := device.NewMem(l.FileSize(), 512)
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFile(mem, l)
	if err != nil {
		t.Fatal(err)
	}
	id := [16]byte{1, 2, 3}
	if err := f.CheckHeader(id); !errors.Is(err, ErrForeign) {
		t.Fatalf("no header: %v", err)
	}
	if err := f.WriteHeader(id); err != nil {
		t.Fatal(err)
	}
	if err := f.CheckHeader(id); err != nil {
		t.Fatal(err)
	}
	if err := f.CheckHeader([16]byte{9}); !errors.Is(err, ErrForeign) {
		t.Fatalf("other identity: %v", err)
	}
	l2, _ := NewLayout(Options{Data: 4, Parity: 2, BlockSize: 512, Blocks: 100, Depth: 2})
	f2, _ := NewFile(mem, l2)
	if err := f2.CheckHeader(id); !errors.Is(err, ErrForeign) {
		t.Fatalf("other layout: %v", err)
	}
	b := make([]byte, 1)
	mem.ReadAt(b, l.ParitySize()+30)
	b[0] ^= 1
	mem.WriteAt(b, l.ParitySize()+30)
	if err := f.CheckHeader(id); !errors.Is(err, ErrForeign) {
		t.Fatalf("damaged header: %v", err)
	}
	small, _ := device.NewMem(l.ParitySize(), 512)
	fs, _ := NewFile(small, l)
	if err := fs.CheckHeader(id); !errors.Is(err, ErrForeign) {
		t.Fatalf("no room for a header: %v", err)
	}
	if err := fs.WriteHeader(id); err == nil {
		t.Fatal("header written past the end")
	}
}

// FuzzHeader: any block is either the header of the layout and identity
// it was checked against, or refused with ErrForeign; never a panic.
func FuzzHeader(f *testing.F) {
	l, _ := NewLayout(Options{Data: 4, Parity: 2, BlockSize: 512, Blocks: 100})
	id := [16]byte{7}
	f.Add(l.header(id))
	f.Add([]byte("DIFPAR\x00\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		err := l.checkHeader(b, id)
		if err != nil && !errors.Is(err, ErrForeign) {
			t.Fatal(err)
		}
		if err == nil && string(b[:headerLen]) != string(l.header(id)[:headerLen]) {
			t.Fatal("accepted a header that is not the layout's")
		}
	})
}
