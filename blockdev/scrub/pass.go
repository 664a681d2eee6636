package scrub

import (
	"errors"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// A pass over a range, across the runs that stop and resume it: where the
// state of an image with its own PI is kept in a store, and what a
// resumed pass found before it stopped.

// ImageStateVolume is the volume in which a store keeps the scrub state
// of an image with its own PI (an extended-LBA image or a DIX pair): a
// volume without tuples, whose manifest records the image's format and
// size, and whose cursors and findings log are the scrub's.
const ImageStateVolume = "pi-image"

// OpenImageState returns the tuples of the volume that keeps, in kv, the
// scrub state of an image with its own PI, of format f and blocks blocks,
// identified by deviceID (recorded with tool in the manifest). The volume
// is created on first use. A store that keeps the state of an image of
// another format, size or identity fails with a
// *store.ManifestMismatchError, so that the findings of two images never
// mix. Use it with NewStoreState.
func OpenImageState(kv store.KV, f dif.Format, blocks int64, deviceID, tool string) (*store.Tuples, error) {
	m := store.NewManifest(f.String(), f.BlockSize(), f.TupleSize(), blocks*int64(f.BlockSize()), deviceID)
	m.Tool = tool
	t, err := store.OpenTuples(kv, ImageStateVolume, &m)
	if errors.Is(err, store.ErrNotFound) {
		t, err = store.CreateTuples(kv, ImageStateVolume, m)
	}
	return t, err
}

// Earlier is what the stopped pass that a resumed scrub continues found
// before it stopped.
type Earlier struct {
	// Bad holds its bad blocks: add those of the run (BadRanges.AddFinding
	// from Options.OnFinding) to have the whole pass's.
	Bad BadRanges
	// Blocks counts its bad blocks (Bad.Blocks() as loaded).
	Blocks int64
	// Failures counts its failed checks by kind.
	Failures map[blockdev.Kind]int64
}

// LoadEarlier returns what the stopped pass over [start, end) that Run
// with Options.Resume continues found before it stopped: the blocks of
// the open findings before its cursor that failed (not transiently) and
// were last seen since the pass started. Without such a pass (no cursor,
// a complete pass, or a cursor that does not load, which Run reports) it
// returns an empty Earlier. Call it before Run, which records the run's
// findings.
func LoadEarlier(state State, start, end int64) (*Earlier, error) {
	e := &Earlier{Failures: map[blockdev.Kind]int64{}}
	c, ok, err := state.LoadCursor(start, end)
	if err != nil || !ok || c.Started.IsZero() || c.Next <= start || c.Next >= end {
		return e, nil
	}
	for fd, err := range state.OpenFindings(start, c.Next) {
		if err != nil {
			return nil, err
		}
		if !fd.LastSeen.Before(c.Started) && fd.Bad() {
			e.Bad.AddFinding(fd)
			e.Failures[fd.Kind]++
		}
	}
	e.Blocks = e.Bad.Blocks()
	return e, nil
}

// PassFailed returns the failed blocks of the whole pass r belongs to:
// those this run found and, when it resumed a stopped pass, those that
// pass found before it stopped (earlier, from LoadEarlier; nil for none).
func (r *Report) PassFailed(earlier *Earlier) int64 {
	n := r.Failed
	if r.Resumed && earlier != nil {
		n += earlier.Blocks
	}
	return n
}
