package pebble

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/difctl/difctl/store"
)

// Opening a Pebble store safely.
//
// Pebble, given a directory without its manifest marker, takes it for a new
// database: it creates one and deletes every file with a Pebble name that
// the new database does not refer to (the old tables and logs). Its default
// logger exits the process on a fatal error, and its default event listener
// turns detected corruption into such a fatal error. open checks the
// directory before Pebble sees it, opens existing stores with
// ErrorIfNotExists, and gives Pebble a logger and listener that record the
// failure (see faultLog) so that it comes back as an error.

// faultLog is the first fatal or corruption event of one Pebble instance:
// what its logger's Fatalf and its DataCorruption and BackgroundError
// events report.
type faultLog struct {
	dir  string
	mu   sync.Mutex
	err  error  // sticky: set by Fatalf; every later call returns it
	path string // the file of the last corruption event
}

func (f *faultLog) fatal() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// setFatal records err as the sticky failure unless one is recorded.
func (f *faultLog) setFatal(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

func (f *faultLog) corruptPath() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.path == "" {
		return f.dir
	}
	return f.path
}

// Infof drops Pebble's informational chatter (it would otherwise reach a
// CLI's stderr).
func (f *faultLog) Infof(string, ...any) {}

// Errorf drops Pebble's error reports too: each reaches the caller as an
// error, which is what a library should give.
func (f *faultLog) Errorf(string, ...any) {}

// Fatalf records the failure instead of exiting: the call that triggered it
// and every later call on the store returns it. (Pebble's own test logger
// returns from Fatalf as well; its callers return an error after it.)
func (f *faultLog) Fatalf(format string, args ...any) {
	msg := oneLineText(fmt.Sprintf(format, args...))
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return
	}
	switch {
	case strings.Contains(msg, "corrupt") || strings.Contains(msg, "does not exist") || strings.Contains(msg, "no such file"):
		p := f.path
		if p == "" {
			p = f.dir
		}
		f.err = &store.CorruptFileError{Path: p, Reason: msg}
	default:
		f.err = fmt.Errorf("%w: pebble:%s: %s", store.ErrFailed, f.dir, msg)
	}
}

func (f *faultLog) listener() *pebble.EventListener {
	return &pebble.EventListener{
		DataCorruption: func(info pebble.DataCorruptionInfo) {
			f.mu.Lock()
			f.path = info.Path
			f.mu.Unlock()
		},
		BackgroundError: func(error) {},
	}
}

func oneLineText(s string) string { return strings.Join(strings.Fields(s), " ") }

// engineText is a Pebble error's message on one line, without the
// "<corruption detail carrier>" its error library appends.
func engineText(err error) string {
	return oneLineText(strings.ReplaceAll(err.Error(), "<corruption detail carrier>", ""))
}

// storeFS is the operating system's file system as a store uses it: store
// directories are created 0700 and files 0600 whatever the umask (the
// tuples say what the data was; nobody else should rewrite them), and the
// directory lock is taken by lockStore.
type storeFS struct {
	vfs.FS
	dir      string
	readOnly bool
}

func (s storeFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := s.FS.Create(name, c)
	if err == nil {
		restrict(f)
	}
	return f, err
}

func (s storeFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := s.FS.OpenReadWrite(name, c, opts...)
	if err == nil {
		restrict(f)
	}
	return f, err
}

func (s storeFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := s.FS.ReuseForWrite(oldname, newname, c)
	if err == nil {
		restrict(f)
	}
	return f, err
}

func (s storeFS) MkdirAll(dir string, _ os.FileMode) error { return s.FS.MkdirAll(dir, 0o700) }

func (s storeFS) Lock(name string) (io.Closer, error) { return lockStore(s.dir, name, s.readOnly) }

// isStoreFile tells whether name is one of the files a Pebble store
// keeps in its directory.
func isStoreFile(name string) bool {
	switch {
	case name == "LOCK", name == bulkTempDir, name == "CURRENT", name == stateFile, name == stateTemp:
		return true
	case strings.HasPrefix(name, "MANIFEST-"), strings.HasPrefix(name, "OPTIONS-"), strings.HasPrefix(name, "marker."):
		return true
	case strings.HasSuffix(name, ".sst"), strings.HasSuffix(name, ".log"), strings.HasSuffix(name, ".blob"):
		return true
	case strings.HasPrefix(name, "temporary.") || strings.HasSuffix(name, ".dbtmp"):
		return true
	}
	return false
}

// checkStoreDir looks at dir before Pebble opens it and says whether a
// store exists there. It refuses what Pebble would reinitialise or follow.
func checkStoreDir(fsys vfs.FS, osFS bool, dir string, o store.OpenOptions) (exists bool, err error) {
	where := "pebble:" + dir
	if osFS {
		fi, err := os.Lstat(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if !o.Create {
				return false, fmt.Errorf("%w: no store at %s", store.ErrNotFound, where)
			}
			if o.ReadOnly {
				return false, fmt.Errorf("%w: no store at %s (a read-only open creates none)", store.ErrNotFound, where)
			}
			if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
				return false, fmt.Errorf("store: create %s: %v", where, err)
			}
			if err := os.Mkdir(dir, 0o700); err != nil {
				return false, fmt.Errorf("store: create %s: %v", where, err)
			}
			return false, nil
		case err != nil:
			return false, fmt.Errorf("store: open %s: %v", where, err)
		case fi.Mode()&fs.ModeSymlink != 0:
			return false, fmt.Errorf("%w: %s is a symbolic link (name the store's real directory)", store.ErrNotStore, dir)
		case !fi.IsDir():
			return false, fmt.Errorf("%w: %s is not a directory", store.ErrNotStore, dir)
		}
	}
	names, err := fsys.List(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && !osFS {
			if !o.Create || o.ReadOnly {
				return false, fmt.Errorf("%w: no store at %s", store.ErrNotFound, where)
			}
			return false, nil
		}
		return false, fmt.Errorf("store: open %s: %v", where, err)
	}
	var marker, pebbleFiles, dataFiles bool
	var foreign []string
	for _, n := range names {
		switch {
		case strings.HasPrefix(n, "marker.manifest."):
			marker = true
		case isStoreFile(n):
			pebbleFiles = pebbleFiles || n != "LOCK" && n != stateFile && n != stateTemp
			// What only a store that held data has: tables, a log with
			// records, the state file of a store once closed or loaded.
			switch {
			case strings.HasSuffix(n, ".sst"), strings.HasSuffix(n, ".blob"), n == stateFile:
				dataFiles = true
			case strings.HasSuffix(n, ".log"):
				if fi, err := fsys.Stat(fsys.PathJoin(dir, n)); err != nil || fi.Size() > 0 {
					dataFiles = true
				}
			}
		default:
			foreign = append(foreign, n)
		}
		if osFS && n != bulkTempDir {
			if fi, err := os.Lstat(filepath.Join(dir, n)); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
				return false, fmt.Errorf("%w: %s: %s is a symbolic link", store.ErrNotStore, where, n)
			}
		}
	}
	switch {
	case marker:
		return true, nil
	case pebbleFiles && !dataFiles && o.Create && !o.ReadOnly && len(foreign) == 0:
		// A creation interrupted before Pebble wrote its manifest marker:
		// no table, no logged commit, nothing to lose. Create it again.
		return false, nil
	case pebbleFiles:
		return false, &store.CorruptFileError{Path: filepath.Join(dir, "marker.manifest.*"),
			Reason: "missing: the directory holds a store's tables and logs but not the marker naming its manifest (nothing was changed)"}
	case len(foreign) > 0:
		return false, fmt.Errorf("%w: %s holds files no store made (%s)", store.ErrNotStore, dir, strings.Join(foreign[:min(3, len(foreign))], ", "))
	case !o.Create || o.ReadOnly:
		return false, fmt.Errorf("%w: no store at %s (empty directory)", store.ErrNotFound, where)
	}
	return false, nil
}

// openError turns an error of pebble.Open into one of ours.
func openError(dir string, fault *faultLog, err error) error {
	if ferr := fault.fatal(); ferr != nil {
		return ferr
	}
	switch {
	case pebble.IsCorruptionError(err):
		path := fault.corruptPath()
		if path == dir {
			// Pebble names no file for a damaged OPTIONS file: find it.
			if opt := badOptionsFile(dir); opt != "" {
				path = opt
			}
		}
		return &store.CorruptFileError{Path: path, Reason: engineText(err)}
	case errors.Is(err, fs.ErrNotExist):
		// A file the manifest names is gone.
		return &store.CorruptFileError{Path: dir, Reason: "missing file: " + oneLineText(err.Error())}
	case errors.Is(err, pebble.ErrDBDoesNotExist):
		return &store.CorruptFileError{Path: dir, Reason: "no manifest: " + oneLineText(err.Error())}
	case errors.Is(err, pebble.ErrDBNotPristine):
		// The format-version marker is gone while tables remain.
		return &store.CorruptFileError{Path: filepath.Join(dir, "marker.format-version.*"), Reason: "missing: " + oneLineText(err.Error())}
	case strings.Contains(err.Error(), "size mismatch"):
		return &store.CorruptFileError{Path: fault.corruptPath(), Reason: "a table's size differs from the manifest's record (truncated?): " + oneLineText(err.Error())}
	}
	var be *store.BusyError
	if errors.As(err, &be) {
		return be
	}
	if errors.Is(err, store.ErrNotStore) {
		return err
	}
	if errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("store: open pebble:%s: %s", dir, oneLineText(err.Error()))
	}
	return fmt.Errorf("store: open pebble:%s: %s", dir, oneLineText(err.Error()))
}

// badOptionsFile returns the path of dir's newest OPTIONS file (the one
// Pebble reads) if it does not parse, else "".
func badOptionsFile(dir string) string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	var newest string
	var num uint64
	for _, e := range ents {
		s, ok := strings.CutPrefix(e.Name(), "OPTIONS-")
		if !ok {
			continue
		}
		if v, err := strconv.ParseUint(s, 10, 64); err == nil && (newest == "" || v > num) {
			newest, num = e.Name(), v
		}
	}
	if newest == "" {
		return ""
	}
	path := filepath.Join(dir, newest)
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var o pebble.Options
	if o.Parse(string(b), nil) != nil {
		return path
	}
	return ""
}
