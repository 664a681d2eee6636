package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// The control socket of difctl serve. A served image's store is held by
// the server, so verify, scrub and inspect of it find the store busy;
// they then ask the server, on its control socket, to run them on the
// volume it serves (control_server.go, control_client.go): the same run
// functions, with the served volume instead of one they open, their
// standard output and error forwarded to the client, and their exit
// status its exit status. The check reads through the served Volume, so
// it sees every write of the NBD clients, which go on meanwhile.
//
// The socket's default path is beside a Pebble store's directory,
// STORE.ctl (controlPath): a client finds it from the IMAGE and --store
// it was given. Other stores have no default; --control names a socket on
// both sides.
//
// The protocol is JSON Lines, one object a line, each with "v"
// (controlVersion). The server speaks first:
//
//	S: {"v":1,"type":"hello","server":"difctl ...","pid":N,"volumes":[...]}
//	C: {"v":1,"op":"scrub","image":"a.img","image_path":"/abs/a.img",...}
//	S: {"v":1,"type":"stdout","data":BASE64} and "stderr", any number
//	S: {"v":1,"type":"file_begin","path":P}, "file" (data), "file_end"
//	C: {"v":1,"op":"file_done","path":P,"error":"..."}
//	S: {"v":1,"type":"exit","exit":{"status":4,"error":"..."}}
//
// The client may send {"v":1,"op":"cancel","signal":"SIGINT"} at any
// time; closing its connection cancels the check too. A request the server
// refuses gets {"v":1,"type":"error","error":{"code":C,"message":M}}
// (controlError) and the connection is closed. Lines are bounded
// (maxControlRequest, maxControlFrame); a client that does not send its
// request in time, or does not read, is dropped.

// controlVersion is the protocol's version, in every line. A change that
// an older peer would misread bumps it.
const controlVersion = 1

const (
	// controlSuffix makes the default control socket of a Pebble store
	// from its directory: STORE.ctl.
	controlSuffix = ".ctl"
	// maxControlRequest bounds a line from a client, maxControlFrame one
	// from the server (a chunk of output, base64), controlChunk the bytes
	// of output in one frame.
	maxControlRequest = 64 << 10
	maxControlFrame   = 1 << 20
	controlChunk      = 32 << 10
)

// controlPath returns the default control socket of the store at url:
// STORE.ctl beside a Pebble store's directory, "" for other stores.
func controlPath(url string) string {
	dir := storePath(url)
	if dir == "" {
		return ""
	}
	return filepath.Clean(dir) + controlSuffix
}

// controlRequest is a line from a client: a check to run, or, while it
// runs, a cancellation or the outcome of a file the client wrote.
type controlRequest struct {
	V  int    `json:"v"`
	Op string `json:"op"` // verify, scrub, inspect; cancel, file_done

	// Image and Store are the image and --store as the command was given
	// them (its output names them so); ImagePath and StorePath are the
	// image's absolute path and the store's URL with an absolute path,
	// which say which served volume is meant.
	Image     string `json:"image,omitempty"`
	ImagePath string `json:"image_path,omitempty"`
	Store     string `json:"store,omitempty"`
	StorePath string `json:"store_path,omitempty"`
	// Key: the command was given the volume's key, which the client
	// checked against the volume's key check value in the hello. The key
	// itself never leaves the client; the server checks with its own.
	Key bool `json:"key,omitempty"`
	// The global flags, and whether the client's standard error is a
	// terminal (progress bars are drawn there).
	JSON         bool     `json:"json,omitempty"`
	Quiet        bool     `json:"quiet,omitempty"`
	ProgressJSON bool     `json:"progress_json,omitempty"`
	Terminal     bool     `json:"terminal,omitempty"`
	Args         []string `json:"args,omitempty"` // the command line, for a mapfile's header
	// Range is --range of verify and scrub, as rangeFlag prints it.
	Range   string                `json:"range,omitempty"`
	Scrub   *controlScrubArgs     `json:"scrub,omitempty"`
	From    []string              `json:"from,omitempty"` // verify and scrub: repair sources, absolute paths
	Inspect *controlInspectArgs   `json:"inspect,omitempty"`
	Signal  string                `json:"signal,omitempty"` // cancel: SIGINT or SIGTERM
	Path    string                `json:"path,omitempty"`   // file_done: the file
	Error   string                `json:"error,omitempty"`  // file_done: why it was not written, "" if it was
	client  *controlClientOptions // the client's side, never sent
}

// controlScrubArgs are scrub's flags.
type controlScrubArgs struct {
	Workers     int    `json:"workers,omitempty"`
	Rate        int64  `json:"rate,omitempty"`
	Restart     bool   `json:"restart,omitempty"`
	ErrorsOnly  bool   `json:"errors_only,omitempty"`
	Uncached    bool   `json:"uncached,omitempty"`
	Rereads     int    `json:"rereads"`
	Badblocks   string `json:"badblocks,omitempty"` // written by the client: the server sends it
	BadblocksBS int    `json:"badblocks_block_size,omitempty"`
	Mapfile     string `json:"mapfile,omitempty"` // the same
	Repair      bool   `json:"repair,omitempty"`
}

// controlInspectArgs are inspect's --lba and --count (LBA -1: none).
type controlInspectArgs struct {
	LBA   int64 `json:"lba"`
	Count int64 `json:"count,omitempty"`
}

// controlFrame is a line from the server.
type controlFrame struct {
	V    int    `json:"v"`
	Type string `json:"type"` // hello, stdout, stderr, file_begin, file, file_end, file_abort, exit, error
	// hello: the server and the volumes it serves.
	Server  string          `json:"server,omitempty"`
	PID     int             `json:"pid,omitempty"`
	Volumes []controlVolume `json:"volumes,omitempty"`
	// stdout, stderr, file: bytes of output (base64 in JSON).
	Data []byte        `json:"data,omitempty"`
	Path string        `json:"path,omitempty"` // file_*: the file, as the client named it
	Exit *controlExit  `json:"exit,omitempty"`
	Err  *controlError `json:"error,omitempty"`
}

// controlVolume describes a served volume in the hello.
type controlVolume struct {
	Export    string `json:"export"`
	Image     string `json:"image"` // absolute
	Store     string `json:"store"` // URL, credentials redacted
	ReadOnly  bool   `json:"read_only,omitempty"`
	Keyed     bool   `json:"keyed,omitempty"`
	VolumeUID string `json:"volume_uid,omitempty"` // keyed: what the key check value is derived with
	KeyCheck  string `json:"key_check,omitempty"`
	KeyHeld   bool   `json:"key_held,omitempty"` // keyed: the server has the key
}

// controlExit ends a check: its exit status (exit.go), the line main
// would print ("" for none) and the damaged store file it names, if any.
type controlExit struct {
	Status int    `json:"status"`
	Error  string `json:"error,omitempty"`
	File   string `json:"file,omitempty"`
}

// controlError is a request the server refused, before any check ran.
type controlError struct {
	Code    string `json:"code"` // one of the controlErr constants
	Message string `json:"message"`
}

func (e *controlError) Error() string { return e.Message }

// The codes of controlError.
const (
	controlErrBadRequest = "bad-request"   // not a request line, or not a known op
	controlErrTooLarge   = "too-large"     // a line over maxControlRequest
	controlErrTimeout    = "timeout"       // no request in time
	controlErrVersion    = "version"       // another protocol version
	controlErrPermission = "permission"    // a client of another user
	controlErrTooMany    = "too-many"      // too many connections at once
	controlErrNotServed  = "not-served"    // the image is not one the server serves
	controlErrScrubbing  = "scrub-running" // a scrub of the volume is running
	controlErrStopping   = "stopping"      // the server is stopping
)

// errLineTooLong is a line longer than the reader's bound.
var errLineTooLong = errors.New("line too long")

// readLine reads a line of at most max bytes (its newline not counted)
// from r, and returns it without the newline. A longer line is
// errLineTooLong, a last line without a newline io.ErrUnexpectedEOF.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		frag, err := r.ReadSlice('\n')
		line = append(line, frag...)
		if err == nil {
			line = line[:len(line)-1]
		}
		switch {
		case len(line) > max:
			return nil, errLineTooLong
		case err == nil:
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
}

// A served is what verify, scrub and inspect get when difctl serve runs
// them, for a client of its control socket or on SIGUSR1, instead of
// opening the image: the served volume, and where their files and log
// go. Its methods are those of a command run on its own on a nil
// *served, so the run functions take one path.
type served struct {
	vol      *volume       // the served volume (Close leaves it open)
	key      *blockdev.Key // the server's key, nil without
	withKey  bool          // the client gave the volume's key
	readOnly bool          // serve opened the store read-only (--read-only)
	// log, if not nil, is serve's log, where a check's findings and
	// summary go too (as text); writeFile writes --badblocks and
	// --mapfile, on the client's side.
	log       io.Writer
	writeFile func(path string, fn func(io.Writer) error) error
}

// openVolume is the volume of a check of image, in store mode mode:
// served, the served one; otherwise opened read-only (the image), its
// store in mode (openVolumeMode).
func (s *served) openVolume(ctx context.Context, image, url string, readOnly bool, mode storeMode, key keyFlags) (*volume, error) {
	if s == nil {
		return openVolumeMode(ctx, image, url, readOnly, mode, key)
	}
	if mode != storeRead && s.readOnly {
		return nil, fmt.Errorf("%s is served read-only (serve --read-only), its store opened read-only, and a scrub records its cursor and findings there: run difctl verify %s, or stop the server", image, image)
	}
	if s.withKey && !s.vol.vol.KeyedChecked() {
		return nil, fmt.Errorf("%s is served without its key (serve was given no --key-file or --key-env), so the server cannot check the keyed tags: check without the key (tuples only), or serve it with the key", image)
	}
	v := *s.vol
	v.borrowed = true
	return &v, nil
}

// storeTuples is the store of image opened for inspect: served, the
// served volume's (synced first, so that it holds every write the server
// has completed); otherwise openStoreTuples.
func (s *served) storeTuples(image, url string) (*storeTuples, error) {
	if s == nil {
		return openStoreTuples(image, url, storeRead, nil)
	}
	if !s.readOnly {
		if err := s.vol.vol.Sync(); err != nil {
			return nil, storeFailure("sync "+image, url, err)
		}
	}
	st, err := newStoreTuples(url, s.vol.kv, s.vol.vol.Tuples())
	if err != nil {
		return nil, err
	}
	st.borrowed = true
	return st, nil
}

// volumeKey is the key inspect checks the served volume t's keyed tags
// with: the server's, when the client gave the key (nil when it did not:
// the keyed check is then skipped, as without the key).
func (s *served) volumeKey(image string, t *store.Tuples) (*blockdev.VolumeKey, error) {
	if !s.withKey {
		return nil, nil
	}
	if s.key == nil {
		return nil, fmt.Errorf("%s is served without its key (serve was given no --key-file or --key-env), so the server cannot check the keyed tags: inspect without the key, or serve it with the key", image)
	}
	m := t.Manifest()
	vk, err := s.key.ForVolume(t.Volume(), &m)
	if err != nil {
		return nil, keyError(image, err)
	}
	return vk, nil
}

// findingsLog returns the findings writer of serve's log for a check of
// format f (nil when not served, or served without a log); more says
// where the findings it does not list are.
func (s *served) findingsLog(f dif.Format, more string) *findings {
	if s == nil || s.log == nil {
		return nil
	}
	fw := newFindings(newOutput(s.log, false), f)
	fw.more = more
	return fw
}

// logLine writes line to serve's log, if served with one.
func (s *served) logLine(line string) {
	if s != nil && s.log != nil {
		fmt.Fprintln(s.log, line)
	}
}

// writeFileWith writes path with fn (files.go's writeFileWith), through
// the client when served.
func (s *served) writeFileWith(path string, fn func(io.Writer) error) error {
	if s == nil || s.writeFile == nil {
		return writeFileWith(path, fn)
	}
	return s.writeFile(path, fn)
}

// logLines writes what it is given to w a whole line at a time, each
// after prefix: a check's report in serve's log, whose other writers
// write whole lines too.
type logLines struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	buf    []byte
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.writeLocked(l.buf[:i])
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > 4096 { // no line is that long: write it as it is
		l.writeLocked(l.buf)
		l.buf = l.buf[:0]
	}
	return len(p), nil
}

// flush writes a last line without its newline.
func (l *logLines) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.writeLocked(l.buf)
		l.buf = l.buf[:0]
	}
}

func (l *logLines) writeLocked(line []byte) {
	fmt.Fprintf(l.w, "%s%s\n", l.prefix, line)
}

// controlDeadline is now plus d, or no deadline for d <= 0.
func controlDeadline(d time.Duration) time.Time {
	if d <= 0 {
		return time.Time{}
	}
	return time.Now().Add(d)
}
