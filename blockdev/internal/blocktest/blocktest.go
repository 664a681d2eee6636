// Package blocktest holds the helpers that the tests of blockdev, its
// devices (blockdev/device) and its images (blockdev/pisource) share, so
// that no program links them.
package blocktest

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
)

// Pattern returns n deterministic pseudo-random bytes.
func Pattern(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// WriteImage creates a file named "image" of the given contents in dir.
func WriteImage(t testing.TB, dir string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, "image")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// SkipNoMmap skips a test of the mapped reads of files, which are Linux's
// only (device.File, device.Reader).
func SkipNoMmap(t testing.TB) {
	if runtime.GOOS != "linux" {
		t.Skip("files are mapped on Linux only")
	}
}

// A FailingReader reads R, except that its reads fail with the error given
// to Fail until Fail(nil).
type FailingReader struct {
	R   io.ReaderAt
	err atomic.Pointer[error]
}

// Fail makes every read fail with err; nil ends it.
func (r *FailingReader) Fail(err error) {
	if err == nil {
		r.err.Store(nil)
		return
	}
	r.err.Store(&err)
}

// ReadAt implements io.ReaderAt.
func (r *FailingReader) ReadAt(p []byte, off int64) (int, error) {
	if e := r.err.Load(); e != nil {
		return 0, *e
	}
	return r.R.ReadAt(p, off)
}

// ReadErrors returns the read errors that the tests of a verifier feed its
// device: each of fatal (check.FatalErrors, which end a run), each wrapped,
// and an I/O error of the block (EIO, which does not).
func ReadErrors(fatal []error) []error {
	var errs []error
	for _, err := range fatal {
		errs = append(errs, err, fmt.Errorf("wrapped: %w", err))
	}
	return append(errs, &os.PathError{Op: "read", Path: "dev", Err: syscall.EIO})
}
