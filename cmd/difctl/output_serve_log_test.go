package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev/nbd"
)

// TestFailureLog: a client's retries of one failed read print one line,
// and the count of the others when the window ends or serve stops; a
// different block or export prints its own line; the summary gives the
// totals by export.
func TestFailureLog(t *testing.T) {
	bad := nbd.Failure{Export: "disk.img", Op: "read", Offset: 4096, Length: 4096, Err: errors.New("guard mismatch at LBA 8")}
	var w syncBuffer
	l := &failureLog{w: &w, per: time.Hour}
	for range 9 {
		l.failure(bad)
	}
	other := bad
	other.Offset = 8192
	l.failure(other)
	w2 := bad
	w2.Op, w2.Export = "write", "b.img"
	l.failure(w2)
	l.summary()
	want := "difctl: disk.img: read at offset 4096: guard mismatch at LBA 8\n" +
		"difctl: disk.img: read at offset 8192: guard mismatch at LBA 8\n" +
		"difctl: b.img: write at offset 4096: guard mismatch at LBA 8\n" +
		"difctl: disk.img: read at offset 4096: 8 more like it\n" +
		"difctl: b.img: refused 1 write while serving (difctl inspect lists the findings)\n" +
		"difctl: disk.img: refused 10 reads while serving (difctl inspect lists the findings)\n"
	if w.String() != want {
		t.Errorf("printed:\n%s\nwant:\n%s", w.String(), want)
	}

	// A window that ends prints its count by itself, once; the repeats
	// after it are counted in the next window.
	var w3 syncBuffer
	l = &failureLog{w: &w3, per: time.Second} // (long beside the calls, even on a loaded machine)
	for range 4 {
		l.failure(bad)
	}
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(w3.String(), "3 more like it"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the window's count was not printed:\n%s", w3.String())
		}
	}
	l.failure(bad)
	l.failure(bad)
	l.summary()
	want = "difctl: disk.img: read at offset 4096: guard mismatch at LBA 8\n" +
		"difctl: disk.img: read at offset 4096: 3 more like it\n" +
		"difctl: disk.img: read at offset 4096: 2 more like it\n" +
		"difctl: disk.img: refused 6 reads while serving (difctl inspect lists the findings)\n"
	if w3.String() != want {
		t.Errorf("printed:\n%s\nwant:\n%s", w3.String(), want)
	}
}
