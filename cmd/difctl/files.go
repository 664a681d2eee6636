package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The files commands read and write directly, not through a store: inputs
// checked before a blocking open and sized, outputs written beside their
// target and renamed over it once complete, and the command line recorded
// in them.

// checkImageFile refuses a path that is neither a regular file nor a block
// device, before any open: opening a FIFO blocks until a writer comes, and
// a character device or socket is no image.
func checkImageFile(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			pe.Op = "open" // as the open would have said
		}
		return err
	}
	m := fi.Mode()
	switch {
	case m.IsRegular(), m&fs.ModeDevice != 0 && m&fs.ModeCharDevice == 0:
		return nil
	case m.IsDir():
		return &fs.PathError{Op: "open", Path: path, Err: errors.New("is a directory")}
	}
	kind := "special file"
	switch {
	case m&fs.ModeNamedPipe != 0:
		kind = "FIFO"
	case m&fs.ModeSocket != 0:
		kind = "socket"
	case m&fs.ModeCharDevice != 0:
		kind = "character device"
	}
	return fmt.Errorf("%s is a %s, not an image: want a regular file or a block device", path, kind)
}

func displayName(name string) string {
	if name == "" {
		return "-"
	}
	return name
}

// inputSize returns the size of a regular file or a block device, or -1
// when it is not known in advance (a pipe, a character device).
func inputSize(f *os.File) int64 {
	fi, err := f.Stat()
	if err != nil {
		return -1
	}
	switch {
	case fi.Mode().IsRegular():
		return fi.Size()
	case fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0:
		end, err := f.Seek(0, io.SeekEnd)
		if err != nil {
			return -1
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return -1
		}
		return end
	}
	return -1
}

// eofReader is an empty standard input.
type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// openSizedFile opens a regular file or a block device and returns its size.
func openSizedFile(path string, write bool) (*os.File, int64, error) {
	flag := os.O_RDONLY
	if write {
		flag = os.O_RDWR
	}
	// Before the open: a FIFO would block it until a writer comes.
	if err := checkImageFile(path); err != nil {
		return nil, 0, err
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return nil, 0, err
	}
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		f.Close()
		return nil, 0, &fs.PathError{Op: "open", Path: path, Err: errors.New("is a directory")}
	}
	size := inputSize(f)
	if size < 0 {
		f.Close()
		return nil, 0, fmt.Errorf("%s is neither a regular file nor a block device", path)
	}
	return f, size, nil
}

// writeFileWith writes a file with fn, replacing it only once complete.
func writeFileWith(path string, fn func(io.Writer) error) error {
	outs, err := createOutputs([]string{path})
	if err != nil {
		return err
	}
	defer outs.discard()
	if err := fn(outs.files[0]); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return outs.commit()
}

// checkDistinct refuses an output that is one of the inputs (or another
// output): creating it would truncate what is still to be read.
func checkDistinct(inputs, outputs []string) error {
	var seen []os.FileInfo
	var names []string
	for _, p := range append(append([]string{}, inputs...), outputs...) {
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		for i, s := range seen {
			if os.SameFile(fi, s) {
				return usageErrorf("%s and %s are the same file: an output cannot be an input or another output", names[i], p)
			}
		}
		seen, names = append(seen, fi), append(names, p)
	}
	return nil
}

// outFile is an output being written: a temporary file beside the target,
// renamed over it only once complete, so that a refused, failed or
// interrupted conversion leaves an existing target as it was. Targets that
// are not regular files (block devices) are written in place.
type outFile struct {
	*os.File
	path string // the target
	tmp  bool   // File is a temporary file, renamed to path on commit
}

// outFiles are the outputs of a command, all put in place by commit or
// none: discard, deferred, removes them unless they were committed.
type outFiles struct {
	files     []*outFile
	committed bool
}

// commit makes every output durable and puts it in place.
func (o *outFiles) commit() error {
	for _, f := range o.files {
		if err := f.commit(); err != nil {
			return err
		}
	}
	o.committed = true
	return nil
}

// discard closes and removes the outputs, unless they were committed.
func (o *outFiles) discard() {
	if !o.committed {
		for _, f := range o.files {
			f.discard()
		}
	}
}

// createOutputs opens the output files, checking first that each target
// can be written.
func createOutputs(paths []string) (*outFiles, error) {
	outs := &outFiles{}
	fail := func(err error) (*outFiles, error) {
		outs.discard()
		return nil, err
	}
	for _, p := range paths {
		fi, err := os.Stat(p)
		switch {
		case err == nil && fi.IsDir():
			return fail(&os.PathError{Op: "create", Path: p, Err: errors.New("is a directory")})
		case err == nil && !fi.Mode().IsRegular():
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				return fail(err)
			}
			outs.files = append(outs.files, &outFile{File: f, path: p})
			continue
		case err == nil:
			// The target exists: it must be writable, as it will be replaced.
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				return fail(err)
			}
			f.Close()
		case !errors.Is(err, os.ErrNotExist):
			return fail(err)
		}
		f, err := createTemp(p)
		if err != nil {
			return fail(fmt.Errorf("create %s: %w", p, unwrapPath(err)))
		}
		outs.files = append(outs.files, &outFile{File: f, path: p, tmp: true})
	}
	return outs, nil
}

// createTemp creates a new file beside path, with the permissions a new
// file at path would get: 0644 less the umask (never group- or
// world-writable, whatever the umask).
func createTemp(path string) (*os.File, error) {
	for i := 0; ; i++ {
		name := filepath.Join(filepath.Dir(path), fmt.Sprintf(".%s.tmp%d-%d", filepath.Base(path), os.Getpid(), i))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil || !errors.Is(err, os.ErrExist) || i >= 100 {
			return f, err
		}
	}
}

// commit makes the output durable and puts it in place.
func (o *outFile) commit() error {
	if err := o.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", o.path, unwrapPath(err))
	}
	if err := o.Close(); err != nil {
		return fmt.Errorf("close %s: %w", o.path, unwrapPath(err))
	}
	if o.tmp {
		if err := os.Rename(o.Name(), o.path); err != nil {
			os.Remove(o.Name())
			return err
		}
	}
	return nil
}

// discard closes the output and removes the temporary file.
func (o *outFile) discard() {
	o.Close()
	if o.tmp {
		os.Remove(o.Name())
	}
}

// unwrapPath returns the cause of a *fs.PathError, or err.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// commandLine is the command line as typed, for the headers of the files
// a command writes (GNU ddrescue mapfiles): arguments that need it are
// quoted for a POSIX shell.
func commandLine(args []string) string {
	parts := []string{"difctl"}
	for _, a := range args {
		parts = append(parts, shellQuote(a))
	}
	return strings.Join(parts, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=+,@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
