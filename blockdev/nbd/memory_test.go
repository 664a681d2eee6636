package nbd

import "testing"

// TestTupleCacheFlatWithVolumeSize checks that what a served volume keeps
// of its tuples does not grow with the volume: over 512+8 volumes of two
// sizes, both with more tuple pages than DefaultTupleCacheBytes holds, a
// block written and then read in every tuple page (as random reads over
// the whole volume touch every page) leaves the same number of pages in
// the volume's tuple cache, within the budget. (A cache sized from the
// volume, or the 64 MiB difctl serve used to give it, keeps more pages of
// the larger volume.) Memory is counted in cached pages, not in RSS, so
// that the test does not depend on the collector or the machine.
func TestTupleCacheFlatWithVolumeSize(t *testing.T) {
	sizes := []int64{2 << 30, 8 << 30}
	if testing.Short() {
		sizes = []int64{3 << 29, 3 << 30} // 1.5 and 3 GiB
	}
	var pages []int
	for _, size := range sizes {
		tv := newTestVolume(t, t.TempDir(), size, "512+8")
		// The volume's own cache is made large: the server's budget
		// applies whatever the volume was opened with.
		tv.vol.Tuples().SetPageCache(1 << 30)
		if _, err := NewServer([]Export{{Name: "disk", Volume: tv.vol}}, Options{}); err != nil {
			t.Fatal(err)
		}
		m := tv.vol.Manifest()
		pageBytes := int64(m.PageTuples * m.BlockSize)
		per := pageCacheBytes(tv.vol)
		if size/pageBytes*int64(per) <= DefaultTupleCacheBytes {
			t.Fatalf("%d MiB: its %d tuple pages fit DefaultTupleCacheBytes: the test needs larger volumes", size>>20, size/pageBytes)
		}
		block := make([]byte, m.BlockSize)
		for off := int64(0); off < size; off += pageBytes {
			block[0] = byte(off / pageBytes)
			if _, err := tv.vol.WriteAt(block, off); err != nil {
				t.Fatal(err)
			}
		}
		if err := tv.vol.Sync(); err != nil {
			t.Fatal(err)
		}
		for off := int64(0); off < size; off += pageBytes {
			if _, err := tv.vol.ReadAt(block, off); err != nil {
				t.Fatal(err)
			}
			if block[0] != byte(off/pageBytes) {
				t.Fatalf("block at %d reads %d, wrote %d", off, block[0], byte(off/pageBytes))
			}
		}
		cs := tv.vol.Tuples().PageCacheStats()
		t.Logf("%d MiB: %d tuple pages, %d cached (%d bytes), %d misses", size>>20, size/pageBytes, cs.Pages, cs.Pages*per, cs.Misses)
		if cs.Pages*per > DefaultTupleCacheBytes {
			t.Errorf("%d MiB: %d cached pages of %d bytes exceed the budget of %d bytes", size>>20, cs.Pages, per, DefaultTupleCacheBytes)
		}
		pages = append(pages, cs.Pages)
		tv.close()
	}
	if pages[0] != pages[1] {
		t.Errorf("cached tuple pages grow with the volume: %d at %d MiB, %d at %d MiB", pages[0], sizes[0]>>20, pages[1], sizes[1]>>20)
	}
}
