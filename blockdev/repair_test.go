package blockdev

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/kernels/crc32c"
	"github.com/difctl/difctl/store"
)

// memCopy returns a memory device holding a copy of dev.
func memCopy(t testing.TB, dev device.Device) *device.Mem {
	t.Helper()
	buf := make([]byte, dev.Size())
	if _, err := dev.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	m, err := device.NewMem(dev.Size(), dev.LogicalBlockSize())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.WriteAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	return m
}

// devBytes returns the contents of dev.
func devBytes(t testing.TB, dev device.Device) []byte {
	t.Helper()
	buf := make([]byte, dev.Size())
	if _, err := dev.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	return buf
}

// truncated is a repair source that ends early, and does not say its size.
type truncated struct {
	r   io.ReaderAt
	end int64
}

func (s truncated) ReadAt(p []byte, off int64) (int, error) {
	if off >= s.end {
		return 0, io.EOF
	}
	if int64(len(p)) > s.end-off {
		n, _ := s.r.ReadAt(p[:s.end-off], off)
		return n, io.EOF
	}
	return s.r.ReadAt(p, off)
}

func (s truncated) String() string { return "truncated" }

// A damage pattern changes block lba of dev (whose intended contents are
// model).
type damage struct {
	name  string
	apply func(r *rand.Rand, dev device.Device, lba int64, bs int, model []byte)
}

var damages = []damage{
	{"bit-flip", func(r *rand.Rand, dev device.Device, lba int64, bs int, _ []byte) {
		b := make([]byte, 1)
		off := lba*int64(bs) + int64(r.IntN(bs))
		dev.ReadAt(b, off)
		b[0] ^= 1 << r.IntN(8)
		dev.WriteAt(b, off)
	}},
	{"zeroed", func(_ *rand.Rand, dev device.Device, lba int64, bs int, _ []byte) {
		dev.WriteAt(make([]byte, bs), lba*int64(bs))
	}},
	{"misdirected", func(r *rand.Rand, dev device.Device, lba int64, bs int, model []byte) {
		// Another block's data, as a misdirected write leaves it.
		blocks := int64(len(model) / bs)
		a := (lba + 1 + r.Int64N(blocks-1)) % blocks
		dev.WriteAt(model[a*int64(bs):(a+1)*int64(bs)], lba*int64(bs))
	}},
	{"torn", func(r *rand.Rand, dev device.Device, lba int64, bs int, _ []byte) {
		// The second half of the block from another write.
		dev.WriteAt(blocktest.Pattern(bs/2, r.Uint64()), lba*int64(bs)+int64(bs/2))
	}},
}

// repairFormats are the formats of the damage campaigns.
var repairFormats = []string{"512+8", "4096+8", "4096+16:crc64"}

// TestRepairCampaign damages a volume's device and a backup of it, seeded
// and repeatable, with every pattern, and repairs the volume from the
// backup (and a truncated backup). Every block whose backup copy is
// intact must end byte-identical to the model; every other damaged block
// must be reported unrepairable and left exactly as it was; no other byte
// may change; a check afterwards must fail exactly the unrepairable
// blocks; the findings log must record each outcome.
func TestRepairCampaign(t *testing.T) {
	seeds := 6
	if testing.Short() {
		seeds = 2
	}
	for _, format := range append(repairFormats, "4096+8/keyed") {
		for seed := range seeds {
			t.Run(fmt.Sprintf("%s/seed=%d", format, seed), func(t *testing.T) {
				var key *Key
				if f, ok := strings.CutSuffix(format, "/keyed"); ok {
					format, key = f, testKey(t, byte(seed))
				}
				repairCampaign(t, format, uint64(seed), seed%2 == 1, key)
			})
		}
	}
}

func repairCampaign(t *testing.T, format string, seed uint64, truncate bool, key *Key) {
	const blocks = 192
	r := rand.New(rand.NewPCG(seed, 40))
	tv := newTestVol(t, format, blocks, CreateOptions{Options: Options{StagingBytes: 64 << 10, Key: key}})
	bs := tv.v.BlockSize()
	// Some writes and discards, so that written, unwritten and rewritten
	// blocks all take part.
	for i := range 20 {
		lba := r.IntN(blocks - 4)
		n := 1 + r.IntN(4)
		if i%5 == 4 {
			if err := tv.v.Discard(int64(lba*bs), int64(n*bs)); err != nil {
				t.Fatal(err)
			}
			clear(tv.model[lba*bs : (lba+n)*bs])
			continue
		}
		tv.write(blocktest.Pattern(n*bs, r.Uint64()), int64(lba*bs))
	}
	if err := tv.v.Sync(); err != nil {
		t.Fatal(err)
	}
	backup := memCopy(t, tv.mem)
	// Damage: about 12% of the blocks of the device, and of the backup
	// (a third of those the same blocks).
	for lba := range int64(blocks) {
		if r.IntN(8) == 0 {
			d := damages[r.IntN(len(damages))]
			d.apply(r, tv.mem, lba, bs, tv.model)
			if r.IntN(3) == 0 {
				damages[r.IntN(len(damages))].apply(r, backup, lba, bs, tv.model)
			}
		} else if r.IntN(10) == 0 {
			damages[r.IntN(len(damages))].apply(r, backup, lba, bs, tv.model)
		}
	}
	var src RepairSource = NewRepairSource(backup, "backup")
	end := int64(blocks * bs)
	if truncate {
		end = int64((blocks - 20) * bs)
		src = truncated{backup, end}
	}
	before := devBytes(t, tv.mem)
	bak := devBytes(t, backup)
	wantRepaired, wantLeft := map[int64]bool{}, map[int64]bool{}
	for lba := range int64(blocks) {
		o := lba * int64(bs)
		blk := func(b []byte) []byte { return b[o : o+int64(bs)] }
		if bytes.Equal(blk(before), blk(tv.model)) {
			continue
		}
		if o+int64(bs) <= end && bytes.Equal(blk(bak), blk(tv.model)) {
			wantRepaired[lba] = true
		} else {
			wantLeft[lba] = true
		}
	}
	if len(wantRepaired) == 0 || len(wantLeft) == 0 {
		t.Fatalf("campaign damaged %d repairable and %d unrepairable blocks: pick another seed", len(wantRepaired), len(wantLeft))
	}

	gotRepaired, gotLeft := map[int64]bool{}, map[int64]bool{}
	rep, err := tv.v.Repair(context.Background(), src, RepairOptions{OnProblem: func(p Problem) {
		switch p.Repair {
		case RepairRepaired:
			gotRepaired[p.LBA] = true
			if p.Source != src.String() {
				t.Errorf("block %d repaired from %q, want %q", p.LBA, p.Source, src.String())
			}
		case RepairUnavailable:
			gotLeft[p.LBA] = true
		default:
			t.Errorf("block %d: outcome %q", p.LBA, p.Repair)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Repaired != int64(len(wantRepaired)) || rep.Unrepairable != int64(len(wantLeft)) {
		t.Errorf("report: %d repaired, %d unrepairable; want %d, %d", rep.Repaired, rep.Unrepairable, len(wantRepaired), len(wantLeft))
	}
	for lba := range wantRepaired {
		if !gotRepaired[lba] {
			t.Errorf("block %d: not repaired", lba)
		}
	}
	for lba := range wantLeft {
		if !gotLeft[lba] {
			t.Errorf("block %d: not reported unrepairable", lba)
		}
	}
	after := devBytes(t, tv.mem)
	for lba := range int64(blocks) {
		o := lba * int64(bs)
		want := before[o : o+int64(bs)]
		if wantRepaired[lba] {
			want = tv.model[o : o+int64(bs)]
		}
		if !bytes.Equal(after[o:o+int64(bs)], want) {
			t.Errorf("block %d (repaired %v): wrong bytes after the repair", lba, wantRepaired[lba])
		}
	}
	if !bytes.Equal(bak, devBytes(t, backup)) {
		t.Error("the repair source changed")
	}
	// A check now fails exactly the unrepairable blocks.
	failing := map[int64]bool{}
	scratch := make([]byte, tv.v.ScratchSize(blocks))
	if _, err := tv.v.CheckRun(context.Background(), 0, blocks, scratch, CheckOptions{}, func(p Problem) { failing[p.LBA] = true }); err != nil {
		t.Fatal(err)
	}
	if len(failing) != len(wantLeft) {
		t.Errorf("check after the repair: %d failing blocks, want the %d unrepairable", len(failing), len(wantLeft))
	}
	for lba := range failing {
		if !wantLeft[lba] {
			t.Errorf("block %d fails after the repair", lba)
		}
	}
	// The findings log.
	states := map[int64]store.FindingState{}
	for f, err := range tv.v.Tuples().Findings(store.FindingQuery{}) {
		if err != nil {
			t.Fatal(err)
		}
		states[f.LBA] = f.State
		if f.State == store.FindingRepaired && (f.Source != src.String() || f.Repaired.IsZero()) {
			t.Errorf("finding of block %d: repaired from %q at %v", f.LBA, f.Source, f.Repaired)
		}
	}
	for lba := range wantRepaired {
		if states[lba] != store.FindingRepaired {
			t.Errorf("finding of block %d: %v, want repaired", lba, states[lba])
		}
	}
	for lba := range wantLeft {
		if states[lba] != store.FindingUnrepairable {
			t.Errorf("finding of block %d: %v, want unrepairable", lba, states[lba])
		}
	}
	if s := tv.v.Stats(); s.Repaired != int64(len(wantRepaired)) {
		t.Errorf("Stats.Repaired = %d, want %d", s.Repaired, len(wantRepaired))
	}
}

// TestRepairOnRead: a read of a damaged block of a volume with a repair
// source returns the right bytes without error and heals the device; on
// a read-only volume it returns them and changes nothing; with NoRepair
// it fails as before.
func TestRepairOnRead(t *testing.T) {
	for _, format := range repairFormats {
		t.Run(format, func(t *testing.T) {
			tv := newTestVol(t, format, 64, CreateOptions{})
			bs := tv.v.BlockSize()
			tv.write(blocktest.Pattern(10*bs, 9), int64(5*bs))
			if err := tv.v.Close(); err != nil {
				t.Fatal(err)
			}
			backup := memCopy(t, tv.mem)
			src := NewRepairSource(backup, "backup")
			damage := func() {
				damages[0].apply(rand.New(rand.NewPCG(1, 2)), tv.mem, 7, bs, tv.model)
				damages[1].apply(nil, tv.mem, 40, bs, tv.model)
			}
			read := func(v *Volume) error {
				got := make([]byte, len(tv.model))
				if _, err := v.ReadAt(got, 0); err != nil {
					return err
				}
				if !bytes.Equal(got, tv.model) {
					t.Fatal("read returned wrong bytes")
				}
				return nil
			}
			open := func(o Options) *Volume {
				v, err := Open(context.Background(), tv.fault, tv.kv, o)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { v.Close() })
				return v
			}

			damage()
			v := open(Options{RepairSources: []RepairSource{src}, NoRepair: true})
			if err := read(v); !errors.Is(err, dif.ErrIntegrity) {
				t.Fatalf("NoRepair: read of a damaged volume: %v", err)
			}
			v.Close()

			damaged := devBytes(t, tv.mem)
			v = open(Options{RepairSources: []RepairSource{src}, ReadOnly: true})
			if err := read(v); err != nil {
				t.Fatalf("read-only: %v", err)
			}
			if !bytes.Equal(damaged, devBytes(t, tv.mem)) {
				t.Fatal("read-only: the device changed")
			}
			v.Close()

			v = open(Options{RepairSources: []RepairSource{src}})
			if err := read(v); err != nil {
				t.Fatalf("read: %v", err)
			}
			if s := v.Stats(); s.Repaired != 2 || s.Failed != 0 {
				t.Errorf("stats: %d repaired, %d failed", s.Repaired, s.Failed)
			}
			if !bytes.Equal(devBytes(t, tv.mem), tv.model) {
				t.Fatal("the device was not healed")
			}
			// Both findings are recorded repaired.
			n := 0
			for f, err := range v.Tuples().Findings(store.FindingQuery{State: store.FindingRepaired}) {
				if err != nil {
					t.Fatal(err)
				}
				if f.Source != "backup" {
					t.Errorf("finding %d: source %q", f.LBA, f.Source)
				}
				n++
			}
			if n < 2 {
				t.Errorf("%d repaired findings, want 2 or more", n)
			}
		})
	}
}

// TestRepairStaleBackup: a backup taken before some writes restores only
// the blocks whose copy in it still verifies; the blocks written since
// stay failing, reported unrepairable, and keep their bytes.
func TestRepairStaleBackup(t *testing.T) {
	tv := newTestVol(t, "4096+8", 64, CreateOptions{})
	bs := tv.v.BlockSize()
	if err := tv.v.Sync(); err != nil {
		t.Fatal(err)
	}
	backup := memCopy(t, tv.mem)
	tv.write(blocktest.Pattern(4*bs, 77), int64(10*bs)) // blocks 10-13, newer than the backup
	if err := tv.v.Sync(); err != nil {
		t.Fatal(err)
	}
	for _, lba := range []int64{3, 11, 12, 50} {
		damages[1].apply(nil, tv.mem, lba, bs, tv.model)
	}
	before := devBytes(t, tv.mem)
	var repaired, left []int64
	if _, err := tv.v.Repair(context.Background(), NewRepairSource(backup, "old backup"), RepairOptions{OnProblem: func(p Problem) {
		switch {
		case p.Kind != KindGuard:
			// One problem per block is enough.
		case p.Repair == RepairRepaired:
			repaired = append(repaired, p.LBA)
		default:
			left = append(left, p.LBA)
		}
	}}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(repaired) != "[3 50]" || fmt.Sprint(left) != "[11 12]" {
		t.Fatalf("repaired %v, left %v; want [3 50], [11 12]", repaired, left)
	}
	after := devBytes(t, tv.mem)
	for _, lba := range []int64{11, 12} {
		o := lba * int64(bs)
		if !bytes.Equal(after[o:o+int64(bs)], before[o:o+int64(bs)]) {
			t.Errorf("block %d changed: a stale copy was written", lba)
		}
	}
}

// TestRepairSourceSize: a source of another size is refused.
func TestRepairSourceSize(t *testing.T) {
	tv := newTestVol(t, "512+8", 16, CreateOptions{})
	other, _ := device.NewMem(32*512, 512)
	_, err := tv.v.Repair(context.Background(), NewRepairSource(other, "other"), RepairOptions{})
	if !errors.Is(err, ErrMismatch) {
		t.Fatalf("source of another size: %v", err)
	}
	if _, err := tv.v.Repair(context.Background(), nil, RepairOptions{}); err == nil {
		t.Fatal("repair without a source succeeded")
	}
}

// collidingCopy returns data changed so that its guard (format f) and
// its CRC-32C are those of data: CRCs are linear, so the flips of the
// first bits whose syndromes (the change of guard and CRC-32C each flip
// makes) sum to zero change neither.
func collidingCopy(t *testing.T, f dif.Format, data []byte) []byte {
	t.Helper()
	ts := f.TupleSize()
	syn := func(b []byte) []byte {
		md := make([]byte, ts)
		if err := f.Generate(b, md, dif.Params{}); err != nil {
			t.Fatal(err)
		}
		g := md[:f.Guard().Bits()/8]
		return append(g, byte(crc32c.Checksum(b)), byte(crc32c.Checksum(b)>>8), byte(crc32c.Checksum(b)>>16), byte(crc32c.Checksum(b)>>24))
	}
	base := syn(data)
	nbits := len(base) * 8
	type row struct {
		v   []byte
		set []int
	}
	var basis []row
	for bit := 0; bit < 8*len(data); bit++ {
		c := bytes.Clone(data)
		c[bit/8] ^= 1 << (bit % 8)
		s := syn(c)
		for k := range s {
			s[k] ^= base[k]
		}
		r := row{s, []int{bit}}
		for _, b := range basis {
			p := pivot(b.v)
			if r.v[p/8]>>(p%8)&1 != 0 {
				for k := range r.v {
					r.v[k] ^= b.v[k]
				}
				r.set = symDiff(r.set, b.set)
			}
		}
		if pivot(r.v) < 0 {
			out := bytes.Clone(data)
			for _, b := range r.set {
				out[b/8] ^= 1 << (b % 8)
			}
			return out
		}
		basis = append(basis, r)
		if len(basis) > nbits+1 {
			break
		}
	}
	t.Fatal("no colliding copy found")
	return nil
}

func pivot(v []byte) int {
	for i := range 8 * len(v) {
		if v[i/8]>>(i%8)&1 != 0 {
			return i
		}
	}
	return -1
}

func symDiff(a, b []int) []int {
	m := map[int]bool{}
	for _, x := range a {
		m[x] = !m[x]
	}
	for _, x := range b {
		m[x] = !m[x]
	}
	var out []int
	for x, in := range m {
		if in {
			out = append(out, x)
		}
	}
	return out
}

// TestRepairKeyed: on a keyed volume a copy that passes the guard and the
// sector checksum but not the keyed tag is rejected; a true copy repairs.
func TestRepairKeyed(t *testing.T) {
	key := testKey(t, 7)
	kv := newKeyedVol(t, "4096+8", key, nil, "")
	bs := kv.f.BlockSize()
	good := devBytes(t, kv.dev)
	backup := memCopy(t, kv.dev)
	// Block 5 (written): the backup's copy collides in both CRCs.
	forged := collidingCopy(t, kv.f.WithLayout(dif.Separate), good[5*bs:6*bs])
	if bytes.Equal(forged, good[5*bs:6*bs]) {
		t.Fatal("the colliding copy is the block")
	}
	backup.WriteAt(forged, int64(5*bs))
	damages[1].apply(nil, kv.dev, 5, bs, nil)
	damages[1].apply(nil, kv.dev, 6, bs, nil)

	// Without the key the copies cannot be verified: no repair.
	v, err := Open(context.Background(), kv.dev, kv.kv, Options{RepairSources: []RepairSource{NewRepairSource(backup, "backup")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Repair(context.Background(), nil, RepairOptions{}); !errors.Is(err, ErrKeyRequired) {
		t.Fatalf("repair without the key: %v", err)
	}
	v.Close()

	v = kv.mustOpen(key)
	outcome := map[int64]RepairOutcome{}
	if _, err := v.Repair(context.Background(), NewRepairSource(backup, "backup"), RepairOptions{OnProblem: func(p Problem) {
		outcome[p.LBA] = p.Repair
	}}); err != nil {
		t.Fatal(err)
	}
	if outcome[5] != RepairUnavailable || outcome[6] != RepairRepaired {
		t.Fatalf("outcomes %v: want block 5 unrepairable (forged copy), 6 repaired", outcome)
	}
	after := devBytes(t, kv.dev)
	if bytes.Equal(after[5*bs:6*bs], forged) {
		t.Fatal("the forged copy was written")
	}
	if !bytes.Equal(after[6*bs:7*bs], good[6*bs:7*bs]) {
		t.Fatal("block 6 not restored")
	}
}

// TestRepairMirrorCampaign damages every leg of a volume with two mirror
// legs, seeded, with every pattern: a third of the damaged blocks on more
// than one leg, some on all three. A repair (Volume.Repair, from the legs
// alone) must leave every leg byte-identical to the model for every block
// one leg still held intact, report exactly the others unrepairable, and
// change no byte of them on any leg.
func TestRepairMirrorCampaign(t *testing.T) {
	seeds := 4
	if testing.Short() {
		seeds = 2
	}
	for _, format := range repairFormats {
		for seed := range seeds {
			t.Run(fmt.Sprintf("%s/seed=%d", format, seed), func(t *testing.T) {
				mirrorCampaign(t, format, uint64(seed))
			})
		}
	}
}

func mirrorCampaign(t *testing.T, format string, seed uint64) {
	const blocks = 160
	m := newMirrored(t, format, blocks, 2)
	bs := m.v.BlockSize()
	r := rand.New(rand.NewPCG(seed, 77))
	for i := range 15 {
		lba := r.IntN(blocks - 3)
		m.write(blocktest.Pattern((1+r.IntN(3))*bs, seed*100+uint64(i)), int64(lba*bs))
	}
	if err := m.v.Sync(); err != nil {
		t.Fatal(err)
	}
	m.same()
	for lba := range int64(blocks) {
		if r.IntN(6) != 0 {
			continue
		}
		legs := r.Perm(3)[:1+r.IntN(3)*r.IntN(2)] // mostly one leg, sometimes two or three
		for _, l := range legs {
			damages[r.IntN(len(damages))].apply(r, m.leg(l), lba, bs, m.model)
		}
	}
	var before [3][]byte
	for l := range 3 {
		before[l] = devBytes(t, m.leg(l))
	}
	want := map[int64]bool{} // blocks with an intact copy: repaired
	left := map[int64]bool{}
	for lba := range int64(blocks) {
		o := lba * int64(bs)
		intact, damaged := false, false
		for l := range 3 {
			ok := bytes.Equal(before[l][o:o+int64(bs)], m.model[o:o+int64(bs)])
			intact = intact || ok
			damaged = damaged || !ok
		}
		switch {
		case damaged && intact:
			want[lba] = true
		case damaged:
			left[lba] = true
		}
	}
	if len(want) == 0 || len(left) == 0 {
		t.Fatalf("campaign: %d repairable, %d unrepairable blocks: pick another seed", len(want), len(left))
	}
	gotLeft := map[int64]bool{}
	rep, err := m.v.Repair(context.Background(), nil, RepairOptions{OnProblem: func(p Problem) {
		if !p.Passes() {
			gotLeft[p.LBA] = true
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(gotLeft) != len(left) || rep.Unrepairable != int64(len(left)) {
		t.Errorf("unrepairable: %d reported (%d counted), want %d", len(gotLeft), rep.Unrepairable, len(left))
	}
	for lba := range left {
		if !gotLeft[lba] {
			t.Errorf("block %d: damaged on every leg, not reported", lba)
		}
	}
	for l := range 3 {
		after := devBytes(t, m.leg(l))
		for lba := range int64(blocks) {
			o := lba * int64(bs)
			w := m.model[o : o+int64(bs)]
			if left[lba] {
				w = before[l][o : o+int64(bs)]
			}
			if !bytes.Equal(after[o:o+int64(bs)], w) {
				t.Errorf("leg %d block %d (repairable %v): wrong bytes after the repair", l, lba, want[lba])
			}
		}
	}
}
