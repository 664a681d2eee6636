package blockdev

import (
	"errors"
	"fmt"
	"testing"

	"github.com/difctl/difctl/store"
)

// manifestKey is the store key of the manifest of volume name.
func manifestKey(name string) []byte {
	return append(append([]byte{'T', byte(len(name))}, name...), 'M')
}

// preparedStore returns a mem store holding what the state names of the
// default volume: "none", "volume" (intact, with a finding), "lost" (its
// records without the manifest) or "damaged" (a manifest that does not
// parse).
func preparedStore(t *testing.T, state string) store.KV {
	t.Helper()
	if state == "none" {
		kv := store.NewMem()
		t.Cleanup(func() { kv.Close() })
		return kv
	}
	_, kv, _ := memVolume(t, 64, 9, CreateOptions{}, func(v *Volume) error {
		_, err := v.Tuples().RecordFinding(store.Finding{LBA: 3, N: 1, Field: string(KindGuard)}, true)
		return err
	})
	switch state {
	case "lost":
		kvDelete(t, kv, manifestKey(DefaultVolumeName))
	case "damaged":
		kvSet(t, kv, manifestKey(DefaultVolumeName), []byte("{not json"))
	}
	return kv
}

func TestPrepareCreate(t *testing.T) {
	refuse := errors.New("refused")
	for _, tc := range []struct {
		state     string
		reprotect bool
		check     error
		wantErr   func(error) bool
		resume    bool
		deleted   bool
		manifest  bool // a manifest is returned
		empty     bool // the store holds no record of the volume afterwards
	}{
		{state: "none", empty: true},
		{state: "none", reprotect: true, empty: true},
		{state: "volume", resume: true, manifest: true},
		{state: "volume", check: refuse, wantErr: func(err error) bool { return err == refuse }},
		{state: "volume", reprotect: true, deleted: true, manifest: true, empty: true},
		{state: "volume", reprotect: true, check: refuse, wantErr: func(err error) bool { return err == refuse }},
		{state: "lost", wantErr: func(err error) bool { return errors.Is(err, ErrLostManifest) }},
		{state: "lost", reprotect: true, deleted: true, empty: true},
		{state: "damaged", wantErr: func(err error) bool {
			var pe *PrepareError
			return errors.As(err, &pe) && pe.Op == "open" && errors.Is(err, store.ErrCorrupt)
		}},
		{state: "damaged", reprotect: true, deleted: true, empty: true},
	} {
		t.Run(fmt.Sprintf("state=%s/reprotect=%v/refuse=%v", tc.state, tc.reprotect, tc.check != nil), func(t *testing.T) {
			kv := preparedStore(t, tc.state)
			checked := false
			p, err := PrepareCreate(kv, "", PrepareOptions{Reprotect: tc.reprotect, Check: func(t *store.Tuples) error {
				checked = true
				return tc.check
			}})
			if tc.wantErr != nil {
				if !tc.wantErr(err) {
					t.Fatalf("PrepareCreate: %v, want another error", err)
				}
				if has, _ := store.HasRecords(kv, DefaultVolumeName); !has {
					t.Errorf("a refused PrepareCreate deleted the volume's records")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if checked != (tc.state == "volume") {
				t.Errorf("Check called %v, want it for an intact volume only", checked)
			}
			if p.Resume() != tc.resume || p.Deleted != tc.deleted || (p.Manifest != nil) != tc.manifest {
				t.Errorf("Prior %+v: Resume %v, want %v; Deleted %v, want %v; manifest %v, want %v",
					p, p.Resume(), tc.resume, p.Deleted, tc.deleted, p.Manifest != nil, tc.manifest)
			}
			if (p.Previous() != nil) != (tc.deleted && tc.manifest) {
				t.Errorf("Previous %v, want the deleted volume's manifest only", p.Previous())
			}
			if has, err := store.HasRecords(kv, DefaultVolumeName); err != nil || has == tc.empty {
				t.Errorf("HasRecords = %v, %v; want %v", has, err, !tc.empty)
			}
		})
	}
}

func TestReprotectKey(t *testing.T) {
	own, other := testKey(t, 1), testKey(t, 2)
	kv := store.NewMem()
	t.Cleanup(func() { kv.Close() })
	newKeyedVol(t, "512+8", own, kv, "keyed")
	tu, err := store.OpenTuples(kv, "keyed", nil)
	if err != nil {
		t.Fatal(err)
	}
	km := tu.Manifest()
	keyed := &km
	plain := store.NewManifest("512+8", 512, 8, 64*512, "plain")
	for _, tc := range []struct {
		name    string
		m       *store.Manifest
		key     *Key
		drop    bool
		want    *Key
		wantErr error
	}{
		{"plain", &plain, nil, false, nil, nil},
		{"plain/key", &plain, own, false, own, nil},
		{"plain/drop", &plain, own, true, nil, ErrNotKeyed},
		{"keyed/nokey", keyed, nil, false, nil, ErrKeyRequired},
		{"keyed/own", keyed, own, false, own, nil},
		{"keyed/own/drop", keyed, own, true, nil, nil},
		{"keyed/other", keyed, other, false, nil, ErrWrongKey},
		{"keyed/other/drop", keyed, other, true, nil, ErrWrongKey},
	} {
		t.Run("case="+tc.name, func(t *testing.T) {
			k, err := ReprotectKey("keyed", tc.m, tc.key, tc.drop)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("ReprotectKey: %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil || k != tc.want {
				t.Fatalf("ReprotectKey = %p, %v; want %p", k, err, tc.want)
			}
		})
	}
}
