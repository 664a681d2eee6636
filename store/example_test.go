package store_test

import (
	"errors"
	"fmt"
	"log"

	"github.com/difctl/difctl/store"
)

func Example() {
	kv, err := store.Open("mem:") // "pebble:/path/to/dir" (store/pebble) for a durable store
	if err != nil {
		log.Fatal(err)
	}
	defer kv.Close()

	m := store.NewManifest("4096+8:crc16:type1:pi-last", 4096, 8, 1<<30, "serial-123")
	tp, err := store.OpenTuples(kv, "disk0", &m)
	if errors.Is(err, store.ErrNotFound) {
		tp, err = store.CreateTuples(kv, "disk0", m)
	}
	if err != nil {
		log.Fatal(err)
	}

	// Store the tuples and sector checksums of blocks 10..12.
	tuples := []byte{
		0xd0, 0xdb, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a,
		0x12, 0x34, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0b,
		0xab, 0xcd, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0c,
	}
	if err := tp.WriteRange(10, tuples, []uint32{1, 2, 3}, true); err != nil {
		log.Fatal(err)
	}

	// Read blocks 9..13: 9 and 13 were never written.
	got := make([]byte, 5*8)
	sums := make([]uint32, 5)
	written := store.NewBitmap(5)
	n, err := tp.ReadRange(9, got, sums, written)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("written:", n)
	for i := range 5 {
		fmt.Printf("block %d: written=%v tuple=%x sum=%d\n", 9+i, written.Has(i), got[i*8:i*8+8], sums[i])
	}
	// Output:
	// written: 3
	// block 9: written=false tuple=ffffffffffffffff sum=0
	// block 10: written=true tuple=d0db00000000000a sum=1
	// block 11: written=true tuple=123400000000000b sum=2
	// block 12: written=true tuple=abcd00000000000c sum=3
	// block 13: written=false tuple=ffffffffffffffff sum=0
}

// ExampleTxn_RecordIntent shows the write path of ARCHITECTURE.md, "The crash contract".
func ExampleTxn_RecordIntent() {
	kv := store.NewMem()
	defer kv.Close()
	tp, err := store.CreateTuples(kv, "disk0", store.NewManifest("4096+16:crc64:type1:pi-last", 4096, 16, 1<<30, "serial-123"))
	if err != nil {
		log.Fatal(err)
	}
	newTuples := make([]byte, 2*16) // computed from the new data

	// 1. Make the intents of a whole group of writes durable with one sync.
	x := tp.NewTxn()
	if _, err := x.RecordIntent(100, newTuples, nil); err != nil {
		log.Fatal(err)
	}
	if err := x.Commit(true); err != nil {
		log.Fatal(err)
	}

	// 2. Write the data to the device and sync it (not shown).

	// 3. Fold the intents into the committed pages.
	x = tp.NewTxn()
	for in, err := range tp.AllIntents() {
		if err != nil {
			log.Fatal(err)
		}
		if err := x.FoldIntent(in); err != nil {
			log.Fatal(err)
		}
	}
	if err := x.Commit(false); err != nil {
		log.Fatal(err)
	}
	n, _ := tp.ReadRange(100, make([]byte, 2*16), nil, nil)
	fmt.Println("committed blocks:", n)
	// Output: committed blocks: 2
}

func ExampleTuples_RecordFinding() {
	kv := store.NewMem()
	defer kv.Close()
	tp, err := store.CreateTuples(kv, "disk0", store.NewManifest("512+8:crc16:type1:pi-last", 512, 8, 1<<20, "serial-123"))
	if err != nil {
		log.Fatal(err)
	}
	for range 2 { // the same failure seen by two scrubs is one finding
		if _, err := tp.RecordFinding(store.Finding{LBA: 42, Field: "guard", Expected: []byte{0xd0, 0xdb}, Actual: []byte{0, 0}}, false); err != nil {
			log.Fatal(err)
		}
	}
	for f, err := range tp.Findings(store.FindingQuery{State: store.FindingOpen}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("lba=%d field=%s expected=%x actual=%x state=%s count=%d\n", f.LBA, f.Field, f.Expected, f.Actual, f.State, f.Count)
	}
	// Output: lba=42 field=guard expected=d0db actual=0000 state=open count=2
}

// A protect writes every tuple of an image once: stream them through a
// Loader, which on Pebble builds sstables and ingests them at Finish.
func ExampleTuples_NewLoader() {
	kv, err := store.Open("mem:") // bulk loads pay off on "pebble:PATH"
	if err != nil {
		log.Fatal(err)
	}
	defer kv.Close()
	const blocks = 10000
	tp, err := store.CreateTuples(kv, "disk0", store.NewManifest("512+8:crc16:type1:pi-last", 512, 8, blocks*512, "serial-123"))
	if err != nil {
		log.Fatal(err)
	}
	l, err := tp.NewLoader(0)
	if err != nil {
		log.Fatal(err)
	}
	const chunk = 4096 // blocks per Write: whatever the image reader yields
	tuples := make([]byte, chunk*8)
	sums := make([]uint32, chunk)
	for l.Next() < blocks {
		n := min(chunk, blocks-int(l.Next()))
		// ... fill tuples[:n*8] and sums[:n] from the image ...
		if err := l.Write(tuples[:n*8], sums[:n]); err != nil {
			l.Abort()
			log.Fatal(err)
		}
	}
	if err := l.Finish(true); err != nil { // all or nothing, durable
		log.Fatal(err)
	}
	n, err := tp.ReadRange(0, make([]byte, blocks*8), nil, nil)
	fmt.Println(n, err)
	// Output: 10000 <nil>
}
