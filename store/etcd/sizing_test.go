package etcd

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/difctl/difctl/store"
)

var update = flag.Bool("update", false, "rewrite the generated table of SIZING.md")

// sizingKV records the bytes of every key and value committed to it.
type sizingKV struct {
	store.KV
	writes map[byte]*[2]int64 // record type -> keys, bytes (key + value)
}

type sizingBatch struct {
	store.Batch
	kv *sizingKV
}

func (s *sizingKV) NewBatch() store.Batch { return &sizingBatch{s.KV.NewBatch(), s} }

func (b *sizingBatch) Set(key, value []byte) error {
	// Volume keys: 'T', name length, name, record type, suffix.
	if len(key) > 2 && key[0] == 'T' && len(key) > 2+int(key[1]) {
		w := b.kv.writes[key[2+int(key[1])]]
		if w == nil {
			w = new([2]int64)
			b.kv.writes[key[2+int(key[1])]] = w
		}
		w[0]++
		w[1] += int64(len(key) + len(value))
	}
	return b.Batch.Set(key, value)
}

// etcdKeyOverhead is what etcd stores per key beyond the store's key and
// value: the physical key's prefix (PREFIX "/d", counted for a 16-byte
// PREFIX), bbolt's revision key (17 bytes) and the mvccpb.KeyValue framing
// of key, value, create and mod revisions, version and lease (about 30
// bytes of varints and tags), about 65 bytes in all. etcd's in-memory key
// index adds about as much again per key in RAM, not on disk.
const etcdKeyOverhead = 18 + 17 + 30

// sizingTable derives, from the encodings the store really writes, the
// bytes per protected TiB of each format and the quota that implies.
func sizingTable(t *testing.T) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| format | sums | page value | bytes/page in etcd | tuples/TiB | sums/TiB | page overhead/TiB | total/TiB | intents for 1 GiB unsynced | TiB per 8 GiB quota (2x for history) |\n")
	fmt.Fprintf(&b, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	const tib = float64(1 << 40)
	for _, f := range []struct {
		format      string
		block, tsz  int
		sums        bool
		description string
	}{
		{"512+8", 512, 8, true, ""},
		{"4096+8", 4096, 8, true, ""},
		{"512+16:crc64", 512, 16, false, ""},
		{"4096+16:crc64", 4096, 16, false, ""},
	} {
		kv := &sizingKV{KV: store.NewMem(), writes: map[byte]*[2]int64{}}
		P := store.DefaultPageTuples
		blocks := 4 * P * 4 // four intent records' worth
		m := store.NewManifest(f.format, f.block, f.tsz, int64(blocks*f.block), "sizing")
		m.SectorSums = f.sums
		tp, err := store.CreateTuples(kv, "v", m)
		if err != nil {
			t.Fatal(err)
		}
		// Count what writing the tuples stores, not what creating the
		// volume did (one empty run holding every page).
		clear(kv.writes)
		tuples := bytes.Repeat([]byte{0x5a}, blocks*f.tsz)
		var sums []uint32
		if f.sums {
			sums = make([]uint32, blocks)
		}
		if err := tp.WriteRange(0, tuples, sums, true); err != nil {
			t.Fatal(err)
		}
		x := tp.NewTxn()
		if _, err := x.RecordIntent(0, tuples, sums); err != nil {
			t.Fatal(err)
		}
		if err := x.Commit(true); err != nil {
			t.Fatal(err)
		}
		pages, intents := kv.writes['P'], kv.writes['I']
		if pages == nil || intents == nil || pages[0] != int64(blocks/P) {
			t.Fatalf("%s: recorded %v", f.format, kv.writes)
		}
		pageBytes := float64(pages[1]) / float64(pages[0])
		perPage := pageBytes + etcdKeyOverhead
		pagesPerTiB := tib / float64(f.block*P)
		tupleB := pagesPerTiB * float64(P*f.tsz)
		sumB := 0.0
		if f.sums {
			sumB = pagesPerTiB * float64(P*4)
		}
		total := pagesPerTiB * perPage
		over := total - tupleB - sumB
		intentPerBlock := (float64(intents[1]) + float64(intents[0])*etcdKeyOverhead) / float64(blocks)
		unsynced := float64(1<<30) / float64(f.block) * intentPerBlock
		sumsCol := "no"
		if f.sums {
			sumsCol = "CRC-32C"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %.0f B | %.0f B | %s | %s | %s | %s | %s | %.2f |\n",
			f.format, sumsCol, pageBytes, perPage, gib(tupleB), gib(sumB), gib(over), gib(total), mib(unsynced), float64(8<<30)/(2*total))
	}
	return b.String()
}

func gib(v float64) string { return fmt.Sprintf("%.2f GiB", v/(1<<30)) }
func mib(v float64) string { return fmt.Sprintf("%.1f MiB", v/(1<<20)) }

const (
	sizingBegin = "<!-- sizing table: go test ./store/etcd -run TestSizing -update -->\n"
	sizingEnd   = "<!-- end of sizing table -->\n"
)

// TestSizing checks the table of SIZING.md against the store's encodings
// (-update rewrites it).
func TestSizing(t *testing.T) {
	table := sizingTable(t)
	doc, err := os.ReadFile("SIZING.md")
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok1 := strings.Cut(string(doc), sizingBegin)
	_, after, ok2 := strings.Cut(rest, sizingEnd)
	if !ok1 || !ok2 {
		t.Fatalf("SIZING.md lacks the table markers")
	}
	want := before + sizingBegin + table + sizingEnd + after
	if *update {
		if err := os.WriteFile("SIZING.md", []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if string(doc) != want {
		t.Fatalf("SIZING.md's table is stale; run go test ./store/etcd -run TestSizing -update. Derived:\n%s", table)
	}
}
