package blockdev

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/internal/blocktest"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
	"github.com/difctl/difctl/store/pebble"
)

// checkRemapped opens the volume and checks that it has initial ref tag to,
// reads as model, verifies clean with unwritten blocks, and that every
// written tuple carries to+lba.
func checkRemapped(t *testing.T, dev device.Device, kv store.KV, to uint64, model []byte, unwritten int64) {
	t.Helper()
	ctx := context.Background()
	v, err := Open(ctx, dev, kv, Options{})
	if err != nil {
		t.Fatalf("Open after the remap: %v", err)
	}
	defer v.Close()
	if m := v.Manifest(); m.InitialRefTag != to {
		t.Fatalf("initial ref tag %#x, want %#x", m.InitialRefTag, to)
	}
	got := make([]byte, len(model))
	if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, model) {
		t.Fatalf("volume reads differently after the remap (%v)", err)
	}
	st, err := v.CheckRun(ctx, 0, int(v.Blocks()), make([]byte, v.ScratchSize(int(v.Blocks()))), CheckOptions{}, nil)
	if err != nil || st.Failed != 0 || st.Unwritten != unwritten {
		t.Fatalf("verify after the remap: %+v, %v", st, err)
	}
	f := v.Format()
	tu, w := storedTuples(t, v.Tuples())
	ts := f.TupleSize()
	one := make([]byte, f.BlockSize())
	for b := range int(v.Blocks()) {
		if !w.Has(b) {
			continue
		}
		tp, err := f.ReadTuple(one, tu[b*ts:(b+1)*ts], 0)
		if err != nil {
			t.Fatal(err)
		}
		want := to
		if f.Type() != dif.Type3 {
			want, _ = refAt(f, to, int64(b))
		}
		if tp.RefTag != want {
			t.Fatalf("block %d: ref tag %#x, want %#x", b, tp.RefTag, want)
		}
	}
}

func TestRemapVolume(t *testing.T) {
	ctx := context.Background()
	for _, format := range []string{"512+8", "4096+16:crc64:type2", "4096+16:crc32"} {
		t.Run("format="+format, func(t *testing.T) {
			tv := convertVol(t, format, 300)
			bs := int64(tv.v.BlockSize())
			if err := tv.v.Close(); err != nil {
				t.Fatal(err)
			}
			raw := make([]byte, len(tv.model))
			tv.mem.ReadAt(raw, 0)
			var phases []string
			rep, err := RemapVolume(ctx, tv.fault, tv.kv, 0xfffffff0, RemapOptions{ChunkBlocks: 70, RunBytes: int(33 * bs),
				Progress: func(phase string, done, total int64) {
					if done == total {
						phases = append(phases, phase)
					}
				}})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.Done || rep.From != 0x100 || rep.To != 0xfffffff0 || rep.Rewritten != 290 || rep.Verified.Unwritten != 10 || rep.Verified.OK != 290 ||
				fmt.Sprint(phases) != "[verify remap]" {
				t.Fatalf("report %+v, phases %v", rep, phases)
			}
			raw2 := make([]byte, len(raw))
			tv.mem.ReadAt(raw2, 0)
			if !bytes.Equal(raw, raw2) {
				t.Fatal("the remap changed data")
			}
			// The ref tags wrap at 32 bits for a 16-bit guard.
			checkRemapped(t, tv.fault, tv.kv, 0xfffffff0, tv.model, 10)
			// Again to the same value: nothing to do.
			rep, err = RemapVolume(ctx, tv.fault, tv.kv, 0xfffffff0, RemapOptions{})
			if err != nil || rep.Nothing != RemapNothingSame || rep.Done {
				t.Fatalf("remap to the same value: %+v, %v", rep, err)
			}
		})
	}
}

func TestRemapType3(t *testing.T) {
	tv := convertVol(t, "512+16:crc32:type3", 100)
	tv.v.Close()
	before, _ := storedTuples(t, tv.v.Tuples())
	rep, err := RemapVolume(context.Background(), tv.fault, tv.kv, 5, RemapOptions{})
	if err != nil || rep.Nothing != RemapNothingType3 || rep.Verified.Blocks != 100 || rep.Rewritten != 0 {
		t.Fatalf("type 3 remap: %+v, %v", rep, err)
	}
	tup, err := store.OpenTuples(tv.kv, DefaultVolumeName, nil)
	if err != nil {
		t.Fatal(err)
	}
	if after, _ := storedTuples(t, tup); !bytes.Equal(before, after) || tup.Manifest().InitialRefTag != 0x100 {
		t.Fatal("a type 3 remap changed the volume")
	}
}

func TestRemapRefused(t *testing.T) {
	ctx := context.Background()
	tv := convertVol(t, "512+8", 200)
	tv.v.Close()
	if err := tv.fault.FlipBit(150*512+1, 3); err != nil {
		t.Fatal(err)
	}
	tup, _ := store.OpenTuples(tv.kv, DefaultVolumeName, nil)
	before, _ := storedTuples(t, tup)
	var seen []Problem
	rep, err := RemapVolume(ctx, tv.fault, tv.kv, 9, RemapOptions{Options: Options{Rereads: -1}, OnProblem: func(p Problem) { seen = append(seen, p) }})
	var ie *IntegrityError
	if !errors.As(err, &ie) || ie.LBA != 150 || ie.Failed != 1 || rep.Verified.Failed != 1 || len(seen) != 2 {
		t.Fatalf("remap of a failing volume: %v, %+v, %+v", err, rep, seen)
	}
	tup, err = store.OpenTuples(tv.kv, DefaultVolumeName, nil)
	if err != nil {
		t.Fatalf("the refused remap left the volume unopenable: %v", err)
	}
	if after, _ := storedTuples(t, tup); !bytes.Equal(before, after) || tup.Manifest().InitialRefTag != 0x100 {
		t.Fatal("the refused remap changed the volume")
	}
	if _, err := RemapVolume(ctx, tv.fault, tv.kv, 1<<32, RemapOptions{}); err == nil {
		t.Fatal("remap to a ref tag wider than 32 bits accepted")
	}
}

// TestRemapCrash crashes the store (Pebble on a crashable file system, a
// random half of the unsynced writes kept) instead of each commit of a
// remap in turn, reopens it, checks what an opener sees (the old volume, a
// journal that refuses it, or the new volume), runs the remap again, and
// checks that the volume then verifies with the new ref tags, its data
// unchanged, with the same unwritten blocks.
func TestRemapCrash(t *testing.T) {
	ctx := context.Background()
	const from, to = 0x10, 0x5000
	for _, format := range []string{"512+8", "4096+16:crc64:type2"} {
		t.Run("format="+format, func(t *testing.T) {
			f := dif.MustFormat(format)
			bs := f.BlockSize()
			blocks := 600
			if testing.Short() {
				blocks = 250
			}
			type env struct {
				fs      *vfs.MemFS
				kv      *countingKV
				mem     *device.Mem
				model   []byte
				steps   int
				crashAt int
				clone   *vfs.MemFS
			}
			setup := func(crashAt int) *env {
				e := &env{crashAt: crashAt, fs: vfs.NewCrashableMem()}
				kv, err := pebble.OpenOnFS("db", e.fs)
				if err != nil {
					t.Fatal(err)
				}
				e.kv = &countingKV{KV: kv}
				e.mem, _ = device.NewMem(int64(blocks*bs), min(bs, 4096))
				e.mem.WriteAt(blocktest.Pattern(blocks*bs, 3), 0)
				v, err := Create(ctx, e.mem, e.kv, CreateOptions{Format: f, InitialRefTag: from})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := v.WriteAt(blocktest.Pattern(7*bs+11, 4), int64(3*bs+5)); err != nil {
					t.Fatal(err)
				}
				if err := v.Discard(int64(100*bs), int64(40*bs)); err != nil {
					t.Fatal(err)
				}
				e.model = make([]byte, blocks*bs)
				if _, err := v.ReadAt(e.model, 0); err != nil {
					t.Fatal(err)
				}
				if err := v.Close(); err != nil {
					t.Fatal(err)
				}
				e.kv.hook = func(bool) error {
					n := e.steps
					e.steps++
					if e.clone != nil {
						return errTestCrash
					}
					if n == e.crashAt {
						e.clone = e.fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(uint64(n), 7))})
						return errTestCrash
					}
					return nil
				}
				return e
			}
			opts := RemapOptions{ChunkBlocks: 64}

			e := setup(-1)
			rep, err := RemapVolume(ctx, e.mem, e.kv, to, opts)
			if err != nil || !rep.Done {
				t.Fatalf("remap without a crash: %+v, %v", rep, err)
			}
			total := e.steps
			if total < blocks/64+2 {
				t.Fatalf("only %d commits", total)
			}
			checkRemapped(t, e.mem, e.kv, to, e.model, 40)
			e.kv.Close()

			seen := map[string]int{}
			for k := range total {
				e := setup(k)
				if _, err := RemapVolume(ctx, e.mem, e.kv, to, opts); !errors.Is(err, errTestCrash) {
					t.Fatalf("crash at commit %d: remap returned %v", k, err)
				}
				e.kv.Close()
				kv, err := pebble.OpenOnFS("db", e.clone)
				if err != nil {
					t.Fatalf("reopening the store after a crash at commit %d: %v", k, err)
				}
				// What an opener sees.
				v, err := Open(ctx, e.mem, kv, Options{})
				switch {
				case errors.Is(err, store.ErrInProgress):
					seen["journal"]++
					if !bytes.Contains([]byte(err.Error()), []byte("remap in progress: run difctl remap again to finish")) {
						t.Fatalf("crash at commit %d: %v", k, err)
					}
				case err != nil:
					t.Fatalf("crash at commit %d: Open: %v", k, err)
				default:
					seen[fmt.Sprintf("ref=%#x", v.Manifest().InitialRefTag)]++
					v.Close()
				}
				rep, err := RemapVolume(ctx, e.mem, kv, to, opts)
				if err != nil || !rep.Done && rep.Nothing != RemapNothingSame {
					t.Fatalf("crash at commit %d: remap run again: %+v, %v", k, rep, err)
				}
				checkRemapped(t, e.mem, kv, to, e.model, 40)
				kv.Close()
			}
			t.Logf("%d crash points: %v", total, seen)
			if seen["journal"] == 0 || seen[fmt.Sprintf("ref=%#x", from)] == 0 {
				t.Fatalf("crash points did not cover both a journaled and an untouched volume: %v", seen)
			}
		})
	}
}
