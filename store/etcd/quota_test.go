package etcd

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestQuota fills a cluster with a 24 MiB quota: the write that does not
// fit fails with ErrNoSpace saying what to do, nothing of it is
// acknowledged, and what was stored before still reads back.
func TestQuota(t *testing.T) {
	if testing.Short() {
		t.Skip("short: fills a cluster")
	}
	c := startCluster(t, 1, 24<<20)
	k := openT(t, c.URL(newPrefix(t)), testOptions())
	defer k.Close()
	val := func(i int) []byte { return bytes.Repeat(fmt.Appendf(nil, "%07d", i), 1<<20/8) }
	stored := 0
	var err error
	for i := range 100 {
		b := k.NewBatch()
		b.Set(fmt.Appendf(nil, "k%03d", i), val(i))
		if err = b.Commit(true); err != nil {
			break
		}
		stored++
	}
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "quota-backend-bytes") {
		t.Fatalf("after %d MiB: commit = %v, want ErrNoSpace naming the quota", stored, err)
	}
	if stored < 5 {
		t.Fatalf("only %d values stored before the quota", stored)
	}
	for i := range stored + 1 {
		v, err := k.Get(fmt.Appendf(nil, "k%03d", i))
		switch {
		case i < stored && (err != nil || !bytes.Equal(v, val(i))):
			t.Fatalf("Get(k%03d) at the quota = %d bytes, %v", i, len(v), err)
		case i == stored && err == nil:
			t.Fatalf("the refused value k%03d is stored", i)
		}
	}
}
