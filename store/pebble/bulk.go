package pebble

import (
	"context"
	"fmt"
	"strconv"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/difctl/difctl/store"
)

// Bulk loading on Pebble: Set streams the keys into sstables in a temporary
// directory inside the store (bulkTempDir/N/), each closed (and synced) once
// it holds bulkFileBytes of keys and values; Finish ingests them all with
// one DB.Ingest, which hard-links them into the store and records them in
// one MANIFEST edit. Nothing is visible, and nothing survives a crash,
// before that edit. Ingested keys take a sequence number above every
// earlier commit (Pebble flushes an overlapping memtable first, or queues
// the tables above it), so they replace stored values. Each byte is written
// once instead of to the WAL and again at the memtable flush.
const (
	bulkTempDir = "bulk-tmp"
	// 128 MiB of pages per table: large enough that even a 1 TiB volume's
	// tuples (about 24 GiB at 512-byte blocks) ingest as ~200 tables, small
	// enough to let compaction move and split them cheaply.
	bulkFileBytes = 128 << 20
)

// bulkCompression is the block compression of bulk-loaded tables: none.
// Tuple pages are half random (guards, CRC-32C sums): zstd keeps two
// thirds of their bytes at a small fraction of the speed of a load without
// it, MinLZ and Snappy save little; the disk takes pages faster than a
// compressor makes them smaller, and protect needs the CPU for its guards
// (figures in docs/performance.md, "Constants measured").
var bulkCompression = sstable.NoCompression

// NewBulkWriter implements store.BulkLoader.
func (p *kv) NewBulkWriter() (store.BulkWriter, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return nil, store.ErrClosed
	}
	if p.readOnly {
		return nil, fmt.Errorf("%w: pebble:%s: bulk load", store.ErrReadOnly, p.path)
	}
	if err := p.fault.fatal(); err != nil {
		return nil, err
	}
	dir := p.fs.PathJoin(p.path, bulkTempDir, fmt.Sprint(p.bulkSeq.Add(1)))
	if err := p.fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("store: pebble:%s: bulk load: %v", p.path, err)
	}
	wo := p.opts.MakeWriterOptions(0, p.db.TableFormat())
	wo.Compression = bulkCompression
	return &bulkWriter{kv: p, dir: dir, wo: wo}, nil
}

type bulkWriter struct {
	kv    *kv
	dir   string
	wo    sstable.WriterOptions
	w     *sstable.Writer // current table, nil between tables
	size  int64           // bytes set into w
	files []string        // finished tables
	last  []byte
	count int
	load  uint64 // the load's number, set at Finish
	err   error  // sticky failure
	done  bool
}

func (b *bulkWriter) fail(op string, err error) error {
	if b.err == nil {
		b.err = fmt.Errorf("store: pebble:%s: bulk load: %s: %v", b.kv.path, op, err)
	}
	return b.err
}

func (b *bulkWriter) Set(key, value []byte) error {
	if b.done {
		return store.ErrClosed
	}
	if b.err != nil {
		return b.err
	}
	if err := b.kv.limits.CheckBulkSet(b.last, key, value, b.count == 0); err != nil {
		b.err = err
		return err
	}
	if reserved(key) {
		b.err = fmt.Errorf("%w: key %q is reserved by the store", store.ErrInvalid, key)
		return b.err
	}
	if err := b.openTable(); err != nil {
		return err
	}
	if err := b.w.Set(key, value); err != nil {
		return b.fail("set", err)
	}
	b.last = append(b.last[:0], key...)
	b.count++
	b.size += int64(len(key) + len(value))
	if b.size >= b.kv.bulkSize {
		return b.closeTable()
	}
	return nil
}

// openTable starts a new table unless one is open.
func (b *bulkWriter) openTable() error {
	if b.w != nil {
		return nil
	}
	name := b.kv.fs.PathJoin(b.dir, fmt.Sprintf("%06d.sst", len(b.files)+1))
	f, err := b.kv.fs.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return b.fail("create table", err)
	}
	b.files = append(b.files, name)
	b.w = sstable.NewWriter(objstorageprovider.NewFileWritable(f), b.wo)
	b.size = 0
	return nil
}

// closeTable finishes and syncs the current table.
func (b *bulkWriter) closeTable() error {
	w := b.w
	b.w = nil
	if w == nil {
		return nil
	}
	if err := w.Close(); err != nil {
		return b.fail("close table", err)
	}
	return nil
}

func (b *bulkWriter) Finish(sync bool) error {
	if b.done {
		return store.ErrClosed
	}
	if err := b.err; err != nil {
		b.Abort()
		return err
	}
	var err error
	if len(b.files) > 0 {
		// The load's last key: its number, in the load's own table, so a
		// manifest that loses the load is detected (see state.go).
		b.load = b.kv.loads.Add(1)
		if err = b.openTable(); err == nil {
			if err = b.w.Set(loadKey, strconv.AppendUint(nil, b.load, 10)); err != nil {
				err = b.fail("set", err)
			}
		}
	}
	if err == nil {
		err = b.closeTable()
	}
	if err == nil && len(b.files) > 0 {
		err = b.ingest()
	}
	if err != nil {
		b.Abort()
		return err
	}
	// The load is in; a table left behind in the temporary directory is
	// removed when the store is next opened.
	b.cleanup()
	return nil
}

func (b *bulkWriter) ingest() error {
	p := b.kv
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return store.ErrClosed
	}
	// Make every earlier commit durable first (one WAL sync), so a crash
	// never keeps the load but loses a commit made before it.
	if err := p.db.LogData(nil, pebble.Sync); err != nil {
		return b.fail("sync log", err)
	}
	// Ingest syncs the linked tables' directory, and the MANIFEST or the WAL
	// that records them, before it returns: it is durable whatever sync says.
	if err := p.db.Ingest(context.Background(), b.files); err != nil {
		return b.fail("ingest", err)
	}
	// Count the load as a commit, and record that the store reached it
	// (see state.go).
	p.commitMu.Lock()
	defer p.commitMu.Unlock()
	if err := p.db.Set(genKey, p.genValue(), pebble.Sync); err != nil {
		return b.fail("count commit", err)
	}
	if err := p.ingested(p.gen.Load(), b.load); err != nil {
		return b.fail("record commit counter", err)
	}
	if err := p.fault.fatal(); err != nil {
		b.err = err
		return err
	}
	return nil
}

func (b *bulkWriter) Abort() error {
	if b.done {
		return nil
	}
	if b.w != nil {
		b.w.Close() // the table is removed below; its error does not matter
		b.w = nil
	}
	return b.cleanup()
}

// cleanup ends the writer and removes its temporary directory (ingested
// tables live on as hard links or copies in the store).
func (b *bulkWriter) cleanup() error {
	b.done = true
	b.files = nil
	if err := b.kv.fs.RemoveAll(b.dir); err != nil {
		return fmt.Errorf("store: pebble:%s: bulk load: remove %s: %v", b.kv.path, b.dir, err)
	}
	return nil
}
