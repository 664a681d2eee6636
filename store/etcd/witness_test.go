package etcd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/internal/etcdtest"
	"github.com/difctl/difctl/store"
	"github.com/difctl/difctl/store/pebble"
)

// A Witness is a blockdev.Witness.
var _ blockdev.Witness = (*Witness)(nil)

func testUID(i int) string { return fmt.Sprintf("%032x", i+0xd1fc) }

func witnessRec(uid string, gen uint64, mac byte) store.WitnessRecord {
	return store.WitnessRecord{VolumeUID: uid, Gen: gen, MAC: bytes.Repeat([]byte{mac}, 32)}
}

func openWitnessT(t testing.TB, url string, o Options) *Witness {
	t.Helper()
	w, err := OpenWitness(url, o)
	if err != nil {
		t.Fatalf("OpenWitness: %v", err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// storedGen is the generation the witness holds for uid.
func storedGen(t testing.TB, w *Witness, uid string) uint64 {
	t.Helper()
	rec, ok, err := w.Load(uid)
	if err != nil || !ok {
		t.Fatalf("Load = %v, %v", ok, err)
	}
	return rec.Gen
}

// wantAhead fails unless err is the refusal of gen by a witness at stored.
func wantAhead(t testing.TB, err error, gen, stored uint64) {
	t.Helper()
	var ae *store.WitnessAheadError
	if !errors.As(err, &ae) || !errors.Is(err, store.ErrWitnessAhead) || ae.Gen != gen || ae.StoredGen != stored {
		t.Fatalf("Store(gen %d) = %v; want a *store.WitnessAheadError at %d", gen, err, stored)
	}
}

// TestWitnessLoadStore: a record round-trips in its line under
// PREFIX/w/UID; a lower generation, or the same with another MAC, is
// refused and leaves the record; a damaged record is reported, never
// overwritten.
func TestWitnessLoadStore(t *testing.T) {
	c := startClusterOpts(t, 1, 0, nil, true)
	prefix := newPrefix(t)
	w := openWitnessT(t, c.URL(prefix), testOptions())
	uid := testUID(1)
	if _, ok, err := w.Load(uid); ok || err != nil {
		t.Fatalf("Load before any Store = %v, %v", ok, err)
	}
	rec := witnessRec(uid, 5, 1)
	if err := w.Store(rec); err != nil {
		t.Fatal(err)
	}
	got, ok, err := w.Load(uid)
	if err != nil || !ok || got.VolumeUID != uid || got.Gen != 5 || !bytes.Equal(got.MAC, rec.MAC) {
		t.Fatalf("Load = %+v, %v, %v; want %+v", got, ok, err, rec)
	}
	admin := adminClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	key := prefix + "/w/" + uid
	if r, err := admin.Get(ctx, key); err != nil || len(r.Kvs) != 1 || !bytes.Equal(r.Kvs[0].Value, store.MarshalWitness(rec)) {
		t.Fatalf("the key %s holds %v (%v), want the record's line", key, r, err)
	}

	if err := w.Store(rec); err != nil {
		t.Fatalf("the same record again: %v", err)
	}
	if err := w.Store(witnessRec(uid, 7, 2)); err != nil {
		t.Fatal(err)
	}
	wantAhead(t, w.Store(witnessRec(uid, 6, 3)), 6, 7)
	wantAhead(t, w.Store(witnessRec(uid, 7, 3)), 7, 7)
	if got, _, _ := w.Load(uid); got.Gen != 7 || got.MAC[0] != 2 {
		t.Fatalf("after the refusals: %+v, want generation 7 with its MAC", got)
	}
	// Another volume has its own key.
	if _, ok, err := w.Load(testUID(2)); ok || err != nil {
		t.Fatalf("Load of another volume = %v, %v", ok, err)
	}
	if err := w.Store(witnessRec(testUID(2), 1, 9)); err != nil {
		t.Fatal(err)
	}
	if g := storedGen(t, w, uid); g != 7 {
		t.Fatalf("the other volume's Store moved this one to %d", g)
	}
	// Not a volume uid.
	if _, _, err := w.Load("../d"); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("Load of a bad uid = %v, want ErrInvalid", err)
	}

	// A damaged record, or another volume's under this key.
	for name, v := range map[string][]byte{
		"damaged":      bytes.Replace(store.MarshalWitness(witnessRec(uid, 9, 2)), []byte("gen=9"), []byte("gen=8"), 1),
		"other-volume": store.MarshalWitness(witnessRec(testUID(3), 9, 2)),
	} {
		t.Run("record="+name, func(t *testing.T) {
			if _, err := admin.Put(ctx, key, string(v)); err != nil {
				t.Fatal(err)
			}
			if _, _, err := w.Load(uid); !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("Load = %v, want ErrCorrupt", err)
			}
			if err := w.Store(witnessRec(uid, 100, 4)); !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("Store over it = %v, want ErrCorrupt", err)
			}
			if r, _ := admin.Get(ctx, key); !bytes.Equal(r.Kvs[0].Value, v) {
				t.Fatalf("Store overwrote the damaged record with %q", r.Kvs[0].Value)
			}
		})
	}
	w.Close()
	if _, _, err := w.Load(uid); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Load after Close = %v, want ErrClosed", err)
	}
}

// TestWitnessCAS puts another writer's Store between a Store's read of the
// record and its transaction: a racer that went higher makes the Store
// fail (it must not put its lower generation over the racer's), and one
// that stayed lower makes it compare again and succeed.
func TestWitnessCAS(t *testing.T) {
	c := startClusterOpts(t, 1, 0, nil, true)
	url := c.URL(newPrefix(t))
	a := openWitnessT(t, url, testOptions())
	b := openWitnessT(t, url, testOptions())
	for _, tc := range []struct {
		name    string
		racer   uint64 // the generation the racer stores
		want    uint64 // the generation left
		refused bool
	}{
		{name: "racer-higher", racer: 20, want: 20, refused: true},
		{name: "racer-lower", racer: 8, want: 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			uid := testUID(int(tc.racer))
			if err := a.Store(witnessRec(uid, 5, 1)); err != nil {
				t.Fatal(err)
			}
			raced := false
			testHookWitnessCAS = func() {
				if raced {
					return
				}
				raced = true
				if err := b.Store(witnessRec(uid, tc.racer, 2)); err != nil {
					t.Errorf("the racer's Store: %v", err)
				}
			}
			defer func() { testHookWitnessCAS = nil }()
			err := a.Store(witnessRec(uid, 10, 3))
			testHookWitnessCAS = nil
			if !raced {
				t.Fatal("the racer did not run")
			}
			if tc.refused {
				wantAhead(t, err, 10, tc.racer)
			} else if err != nil {
				t.Fatalf("Store after a lower racer: %v", err)
			}
			if g := storedGen(t, b, uid); g != tc.want {
				t.Fatalf("the witness holds generation %d, want %d", g, tc.want)
			}
		})
	}
}

// TestWitnessRacingWriters has writers on their own connections store
// interleaved generations as fast as they can, while a watch records every
// version of the key: the versions only go up, every Store either
// succeeds or is refused with a *store.WitnessAheadError, and the highest
// generation is what is left.
func TestWitnessRacingWriters(t *testing.T) {
	c := startClusterOpts(t, 1, 0, nil, true)
	prefix := newPrefix(t)
	uid := testUID(7)
	const writers = 4
	rounds := 40
	if testing.Short() {
		rounds = 15
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch := adminClient(t, c).Watch(ctx, prefix+"/w/"+uid)
	var ws []*Witness
	for range writers {
		ws = append(ws, openWitnessT(t, c.URL(prefix), testOptions()))
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers*rounds)
	for i, w := range ws {
		wg.Go(func() {
			// Writer i stores i+1, i+1+writers, ...: each Store races the
			// others' neighbouring generations.
			for r := range rounds {
				gen := uint64(r*writers + i + 1)
				err := w.Store(witnessRec(uid, gen, byte(gen)))
				if err != nil && !errors.Is(err, store.ErrWitnessAhead) {
					errs <- fmt.Errorf("writer %d, generation %d: %w", i, gen, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	top := uint64(writers * rounds)
	if g := storedGen(t, ws[0], uid); g != top {
		t.Fatalf("after the race the witness holds %d, want %d", g, top)
	}
	var seen []uint64
	for resp := range watch {
		for _, ev := range resp.Events {
			rec, err := store.ParseWitness(ev.Kv.Value)
			if err != nil {
				t.Fatal(err)
			}
			seen = append(seen, rec.Gen)
		}
		if len(seen) > 0 && seen[len(seen)-1] == top {
			break
		}
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] <= seen[i-1] {
			t.Fatalf("the witness moved from generation %d to %d (versions %v)", seen[i-1], seen[i], seen)
		}
	}
	t.Logf("%d stores, %d versions of the witness", writers*rounds, len(seen))
}

// TestWitnessAuth: the witness's own user, allowed only its prefix,
// reads and writes it (the password from a file); the store's user, and
// the store's credentials in the store's variables, cannot.
func TestWitnessAuth(t *testing.T) {
	c := startClusterOpts(t, 1, 0, nil, true)
	c.EnableAuth(t,
		etcdtest.User{Name: "witness", Password: "w1tness", Prefixes: []string{"wit/"}},
		etcdtest.User{Name: "volumes", Password: "v0lumes", Prefixes: []string{"vol/"}},
	)
	url := c.URL("wit/cluster1")
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte("w1tness\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The store's variables hold the store's user: the witness ignores them.
	t.Setenv(EnvUser, "volumes")
	t.Setenv(EnvPassword, "v0lumes")
	t.Setenv(EnvWitnessUser, "witness")
	t.Setenv(EnvWitnessPasswordFile, pwFile)
	o, err := WitnessOptionsFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	o.DialTimeout, o.OpTimeout = 5*time.Second, 5*time.Second
	w := openWitnessT(t, url, o)
	uid := testUID(1)
	if err := w.Store(witnessRec(uid, 3, 1)); err != nil {
		t.Fatal(err)
	}
	if g := storedGen(t, w, uid); g != 3 {
		t.Fatalf("Load = %d", g)
	}

	refused := func(t *testing.T, what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrAuth) {
			t.Fatalf("%s = %v, want ErrAuth", what, err)
		}
	}
	t.Run("user=store", func(t *testing.T) {
		// The store's user cannot open the witness, nor a store on its
		// prefix, nor put the key by hand.
		_, err := OpenWitness(url, Options{Username: "volumes", Password: "v0lumes", DialTimeout: 5 * time.Second})
		refused(t, "OpenWitness as the store's user", err)
		_, err = Open(url, Options{Username: "volumes", Password: "v0lumes", LeaseTTL: 3 * time.Second})
		refused(t, "a store on the witness's prefix as the store's user", err)
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + c.Members[0].Client.Host}, Username: "volumes", Password: "v0lumes", DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := cli.Put(ctx, "wit/cluster1/w/"+uid, string(store.MarshalWitness(witnessRec(uid, 1, 1)))); err == nil {
			t.Fatal("the store's user put the witness key")
		}
		// Its own prefix it may use: the witness user may not.
		k := openT(t, c.URL("vol/lun1"), Options{Username: "volumes", Password: "v0lumes", LeaseTTL: 3 * time.Second})
		k.Close()
		_, err = OpenWitness(c.URL("vol/lun1"), o)
		refused(t, "OpenWitness on the store's prefix as the witness's user", err)
	})
	t.Run("user=none", func(t *testing.T) {
		t.Setenv(EnvWitnessUser, "")
		t.Setenv(EnvWitnessPasswordFile, "")
		o, err := WitnessOptionsFromEnv()
		if err != nil {
			t.Fatal(err)
		}
		o.DialTimeout = 5 * time.Second
		_, err = OpenWitness(url, o)
		refused(t, "OpenWitness without the witness's variables", err)
	})
	t.Run("password=wrong", func(t *testing.T) {
		_, err := OpenWitness(url, Options{Username: "witness", Password: "nope", DialTimeout: 5 * time.Second})
		refused(t, "OpenWitness with a wrong password", err)
	})
	t.Run("password=both", func(t *testing.T) {
		t.Setenv(EnvWitnessPassword, "w1tness")
		if _, err := WitnessOptionsFromEnv(); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("a password and a password file: %v, want ErrInvalid", err)
		}
	})
}

// TestWitnessTLS: a witness on a cluster that serves clients over mutual
// TLS, with the CA and client certificate of its own variables.
func TestWitnessTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("short: TLS handshakes")
	}
	files := etcdtest.NewTLS(t)
	c := startClusterOpts(t, 1, 0, files.Server(true), true)
	t.Setenv(EnvWitnessCACert, files.CA)
	t.Setenv(EnvWitnessCert, files.ClientCert)
	t.Setenv(EnvWitnessKey, files.ClientKey)
	o, err := WitnessOptionsFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	url := c.URL(newPrefix(t))
	w := openWitnessT(t, url, o)
	uid := testUID(1)
	if err := w.Store(witnessRec(uid, 2, 1)); err != nil {
		t.Fatal(err)
	}
	if g := storedGen(t, w, uid); g != 2 {
		t.Fatalf("Load over TLS = %d", g)
	}
	o.Cert, o.Key = "", ""
	o.DialTimeout = time.Second
	if w, err := OpenWitness(url, o); err == nil {
		w.Close()
		t.Fatal("OpenWitness without a client certificate succeeded against a server that requires one")
	}
}

// TestWitnessUnreachable: a witness nobody answers fails OpenWitness with
// ErrUnavailable within its dial timeout, and one that stops answering
// fails Load and Store within the request timeout.
func TestWitnessUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	t0 := time.Now()
	_, err = OpenWitness("etcd://"+addr+"/wit", Options{DialTimeout: time.Second})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("OpenWitness of nothing = %v, want ErrUnavailable", err)
	}
	if d := time.Since(t0); d > 4*time.Second {
		t.Fatalf("OpenWitness of nothing took %v with a 1s dial timeout", d)
	}
	if !strings.Contains(err.Error(), "etcd://"+addr+"/wit") {
		t.Errorf("the error does not name the witness: %v", err)
	}
	t.Logf("after %v: %v", time.Since(t0).Round(time.Millisecond), err)

	c := startClusterOpts(t, 1, 0, nil, true)
	w := openWitnessT(t, c.URL(newPrefix(t)), Options{DialTimeout: time.Second, OpTimeout: time.Second})
	c.Members[0].Stop(true)
	t0 = time.Now()
	if _, _, err := w.Load(testUID(1)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Load from a stopped cluster = %v, want ErrUnavailable", err)
	}
	if err := w.Store(witnessRec(testUID(1), 1, 1)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Store to a stopped cluster = %v, want ErrUnavailable", err)
	}
	if d := time.Since(t0); d > 6*time.Second {
		t.Fatalf("Load and Store took %v with a 1s request timeout", d)
	}
}

// openKeyed opens (or creates) a keyed volume on an image file with a
// Pebble store beside it, as difctl protects one, and returns it with the
// function that closes it all.
func openKeyed(t *testing.T, img string, key *blockdev.Key, w blockdev.Witness, create bool) (*blockdev.Volume, func() error, error) {
	t.Helper()
	var dev *device.File
	var err error
	if create {
		dev, err = device.CreateImage(img, 256*4096, device.FileOptions{BlockSize: 4096})
	} else {
		dev, err = device.OpenFile(img, device.FileOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	kv, err := pebble.Open(img+".difdb", store.OpenOptions{Create: create})
	if err != nil {
		t.Fatal(err)
	}
	o := blockdev.Options{Key: key, Witness: w}
	var v *blockdev.Volume
	if create {
		v, err = blockdev.Create(context.Background(), dev, kv, blockdev.CreateOptions{Options: o, Format: dif.MustFormat("4096+8")})
	} else {
		v, err = blockdev.Open(context.Background(), dev, kv, o)
	}
	if err != nil {
		kv.Close()
		dev.Close()
		return nil, nil, err
	}
	return v, func() error {
		err := v.Close()
		kv.Close()
		dev.Close()
		return err
	}, nil
}

// writeSync writes n blocks of fill from lba with the key and syncs.
func writeSync(t *testing.T, v *blockdev.Volume, lba int64, n int, fill byte) error {
	t.Helper()
	if _, err := v.WriteAt(bytes.Repeat([]byte{fill}, n*4096), lba*4096); err != nil {
		t.Fatal(err)
	}
	return v.Sync()
}

// copyVolume copies a closed image and its store to another image name.
func copyVolume(t *testing.T, img, to string) {
	t.Helper()
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(to + ".difdb"); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(to+".difdb", os.DirFS(img+".difdb")); err != nil {
		t.Fatal(err)
	}
}

func witnessKey(t *testing.T) *blockdev.Key {
	t.Helper()
	key, err := blockdev.ParseKey([]byte(strings.Repeat("5a", blockdev.KeySize)))
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// TestWitnessFindsWholeRollback is the whole-volume rollback of issue 44,
// item 4, with the witness in etcd: an old copy of the image and its
// Pebble store, put back after a write with the key, opens as a
// *blockdev.RollbackError; without the witness nothing tells.
func TestWitnessFindsWholeRollback(t *testing.T) {
	c := startClusterOpts(t, 1, 0, nil, true)
	w := openWitnessT(t, c.URL(newPrefix(t)), testOptions())
	key := witnessKey(t)
	dir := t.TempDir()
	img, old := filepath.Join(dir, "disk.img"), filepath.Join(dir, "old.img")

	v, closeV, err := openKeyed(t, img, key, w, true)
	if err != nil {
		t.Fatal(err)
	}
	uid := v.Manifest().VolumeUID
	if err := writeSync(t, v, 0, 8, 1); err != nil {
		t.Fatal(err)
	}
	if err := closeV(); err != nil {
		t.Fatal(err)
	}
	copyVolume(t, img, old) // the attacker's copy

	v, closeV, err = openKeyed(t, img, key, w, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeSync(t, v, 16, 8, 2); err != nil {
		t.Fatal(err)
	}
	gen, _, _, err := v.Seal()
	if err != nil {
		t.Fatal(err)
	}
	if err := closeV(); err != nil {
		t.Fatal(err)
	}
	if g := storedGen(t, w, uid); g != gen {
		t.Fatalf("the witness holds generation %d, the store %d", g, gen)
	}

	copyVolume(t, old, img) // put back
	for _, k := range []*blockdev.Key{key, nil} {
		t.Run(fmt.Sprintf("key=%v", k != nil), func(t *testing.T) {
			_, _, err := openKeyed(t, img, k, w, false)
			var re *blockdev.RollbackError
			if !errors.As(err, &re) || !errors.Is(err, blockdev.ErrRolledBack) || !errors.Is(err, dif.ErrIntegrity) ||
				re.WitnessGen != gen || re.StoreGen >= gen {
				t.Fatalf("Open of the old copy = %v; want a *blockdev.RollbackError below %d", err, gen)
			}
			if want := fmt.Sprintf("rolled back to generation %d (witness has %d)", re.StoreGen, gen); !strings.Contains(err.Error(), want) {
				t.Fatalf("message %q, want %q", err, want)
			}
		})
	}
	if g := storedGen(t, w, uid); g != gen {
		t.Fatalf("the refused opens moved the witness to %d", g)
	}
	// Without the witness the old copy is a consistent volume.
	v, closeV, err = openKeyed(t, img, key, nil, false)
	if err != nil {
		t.Fatalf("the old copy without the witness: %v", err)
	}
	if _, _, err := v.CheckSeal(); err != nil {
		t.Fatalf("the old copy's seal: %v", err)
	}
	closeV()
}

// TestWitnessCopiesRace opens two copies of one keyed volume at once, as an
// attacker who cloned image and store would: both start at the witness's
// generation; the first to sync moves the witness on, and the other's
// sync to the same generation is refused by the witness's compare-and-
// swap, a *blockdev.RollbackError, rather than recorded over it.
func TestWitnessCopiesRace(t *testing.T) {
	c := startClusterOpts(t, 1, 0, nil, true)
	url := c.URL(newPrefix(t))
	key := witnessKey(t)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.img"), filepath.Join(dir, "b.img")
	v, closeV, err := openKeyed(t, a, key, openWitnessT(t, url, testOptions()), true)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeSync(t, v, 0, 4, 1); err != nil {
		t.Fatal(err)
	}
	closeV()
	copyVolume(t, a, b)
	va, closeA, err := openKeyed(t, a, key, openWitnessT(t, url, testOptions()), false)
	if err != nil {
		t.Fatal(err)
	}
	defer closeA()
	vb, closeB, err := openKeyed(t, b, key, openWitnessT(t, url, testOptions()), false)
	if err != nil {
		t.Fatal(err)
	}
	defer closeB()
	if err := writeSync(t, va, 8, 4, 2); err != nil {
		t.Fatal(err)
	}
	ga, _, _, _ := va.Seal()
	err = writeSync(t, vb, 8, 4, 3)
	gb, _, _, _ := vb.Seal()
	var re *blockdev.RollbackError
	if !errors.As(err, &re) || !errors.Is(err, store.ErrWitnessAhead) || !errors.Is(err, dif.ErrIntegrity) || re.WitnessGen != ga {
		t.Fatalf("the second copy's Sync (generation %d, the first's %d) = %v; want a *blockdev.RollbackError from the witness", gb, ga, err)
	}
}
