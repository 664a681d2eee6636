package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/store"
	"github.com/spf13/cobra"
)

// The client's side of the control socket (control.go): verify, scrub and
// inspect whose store is busy ask the server that holds it, if one
// answers, to run them.

// controlClientOptions are the client's side of a request.
type controlClientOptions struct {
	socket string   // where to ask
	key    keyFlags // the key given, checked against the hello
	files  []string // the files the server may write through the client
	// refuse, if not nil, is why the command cannot run on a server,
	// returned once one answers.
	refuse error
}

const (
	// controlDialTimeout and controlHelloTimeout bound the wait for a
	// server that is stuck; controlCancelWait the wait for the end of a
	// check after a cancellation.
	controlDialTimeout  = 2 * time.Second
	controlHelloTimeout = 10 * time.Second
	controlCancelWait   = 30 * time.Second
)

// servedHelp is the paragraph of the help of verify, scrub and inspect
// (command) on a served image.
func servedHelp(command string) string {
	return `The store of an image that difctl serve serves is the server's: ` + command + `
then asks the server, on its control socket (--control PATH; by default
STORE.ctl beside a Pebble store, IMAGE.difdb.ctl), to run it on the
volume it serves, which it goes on serving. The output and exit status
are the same; Ctrl-C cancels it on the server. Without a server that
answers, the store is busy (exit 8).`
}

// addControlFlag registers --control on verify, scrub and inspect.
func addControlFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVar(p, "control", "", "when the store is busy, ask the difctl serve holding it to run the check, on its control socket `PATH` (default: STORE.ctl beside a Pebble store)")
}

// newControlRequest is the request of op for image (as the command was
// given it) with --store storeFlag, --control control and the global
// options g.
func newControlRequest(op, image, storeFlag, control string, g globalOptions) (*controlRequest, error) {
	abs, err := filepath.Abs(image)
	if err != nil {
		return nil, err
	}
	url := storeURL(image, storeFlag)
	if control == "" {
		control = controlPath(url)
	}
	r := &controlRequest{V: controlVersion, Op: op, Image: image, ImagePath: abs, Store: storeFlag, StorePath: absStoreURL(url),
		JSON: g.JSON, Quiet: g.Quiet, ProgressJSON: g.ProgressJSON, Args: g.Args,
		client: &controlClientOptions{socket: control, key: g.Key}}
	if g.Key.Witness != "" {
		r.client.refuse = usageErrorf("--witness: %s is served, and a served volume's witness is checked by its server (serve --witness): leave out --witness", image)
	}
	return r, nil
}

// onServer runs a command on the server that holds its store. err is the
// command's failure to open its store: unless it says that the store is
// busy (and the command is not run by a server already), it is returned
// as it is. Otherwise, if a server answers on the control socket of the
// request (req builds it only then), the server runs the command on the
// volume it serves, and its output and exit status are the command's; if
// none answers, err is returned.
func onServer(ctx context.Context, err error, s *served, req func() (*controlRequest, error), stdout, stderr io.Writer) error {
	if s != nil || !errors.Is(err, store.ErrBusy) {
		return err
	}
	r, rerr := req()
	if rerr != nil || r.client.socket == "" {
		return err
	}
	cl, derr := dialControl(r.client.socket)
	switch {
	case derr != nil:
		return fmt.Errorf("%w; control socket %s: %v", err, r.client.socket, derr)
	case cl == nil:
		return err // no server there
	}
	defer cl.c.Close()
	if r.client.refuse != nil {
		return r.client.refuse
	}
	if err := cl.checkKey(r); err != nil {
		return err
	}
	r.Terminal = isTerminal(stderr)
	return cl.run(ctx, r, stdout, stderr)
}

// controlClient is a connection to a server's control socket.
type controlClient struct {
	c      net.Conn
	br     *bufio.Reader
	socket string
	hello  *controlFrame
	mu     sync.Mutex // writes
}

// dialControl connects to the control socket at path and reads the
// server's hello. No server there (no socket, or a stale one) is nil, nil.
// A socket that is not the user's own, a server of another user or one
// that does not say hello in time is an error: it is not asked.
func dialControl(path string) (*controlClient, error) {
	fi, err := os.Lstat(path)
	switch {
	case err != nil:
		return nil, nil
	case fi.Mode()&os.ModeSymlink != 0:
		return nil, errors.New("a symbolic link, not followed")
	case fi.Mode()&os.ModeSocket == 0:
		return nil, errors.New("not a socket")
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("owned by user %d, not asked", st.Uid)
	}
	c, err := dialUnix(path, controlDialTimeout)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return nil, nil // a server killed before it could remove it
	case err != nil:
		return nil, unwrapPath(err)
	}
	if uc, ok := c.(*net.UnixConn); ok {
		uid, _, known, err := peerCred(uc)
		if err == nil && known && uid != os.Geteuid() {
			c.Close()
			return nil, fmt.Errorf("its server runs as user %d, not asked", uid)
		}
	}
	cl := &controlClient{c: c, br: bufio.NewReaderSize(c, 64<<10), socket: path}
	c.SetReadDeadline(time.Now().Add(controlHelloTimeout))
	f, err := cl.read()
	switch {
	case err != nil:
		c.Close()
		return nil, fmt.Errorf("no hello from the server: %v", err)
	case f.Type == "error" && f.Err != nil:
		c.Close()
		return nil, fmt.Errorf("refused: %s", f.Err.Message)
	case f.Type != "hello":
		c.Close()
		return nil, fmt.Errorf("a %q line where the server's hello belongs", f.Type)
	}
	c.SetReadDeadline(time.Time{})
	cl.hello = f
	return cl, nil
}

// read reads a line of the server.
func (cl *controlClient) read() (*controlFrame, error) {
	line, err := readLine(cl.br, maxControlFrame)
	if err != nil {
		return nil, err
	}
	var f controlFrame
	if err := json.Unmarshal(line, &f); err != nil {
		return nil, fmt.Errorf("not a control line: %v", err)
	}
	if f.V != controlVersion {
		return nil, fmt.Errorf("the server speaks control protocol version %d, this difctl %d: use the same difctl for both", f.V, controlVersion)
	}
	return &f, nil
}

// send writes r as one line.
func (cl *controlClient) send(r *controlRequest) error {
	r.V = controlVersion
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.c.SetWriteDeadline(time.Now().Add(controlDialTimeout))
	_, err = cl.c.Write(append(b, '\n'))
	return err
}

// checkKey checks the key the command was given, if any, against the
// volume the hello describes, as opening the volume would: the server
// checks with its own key, which never leaves it, nor the client's.
func (cl *controlClient) checkKey(r *controlRequest) error {
	k, err := r.client.key.load()
	if err != nil || k == nil {
		return err
	}
	var hv *controlVolume
	for i, v := range cl.hello.Volumes {
		if v.Image == r.ImagePath || sameFileName(v.Image, r.ImagePath) {
			hv = &cl.hello.Volumes[i]
		}
	}
	if hv == nil {
		return fmt.Errorf("%s: the server on %s does not serve it, so the key cannot be checked", r.Image, cl.socket)
	}
	m := store.Manifest{KeyCheck: hv.KeyCheck, VolumeUID: hv.VolumeUID}
	if _, err := k.ForVolume(blockdev.DefaultVolumeName, &m); err != nil {
		return keyError(r.Image, err)
	}
	r.Key = true
	return nil
}

// sameFileName reports whether the paths a and b name the same file.
func sameFileName(a, b string) bool {
	fi, err := os.Stat(a)
	return err == nil && sameFile(fi, b)
}

// run sends the request, writes the check's output and files as they
// come and returns its outcome as the command's error. A cancellation of
// ctx (Ctrl-C) is passed on; the check then ends as the command on its
// own would.
func (cl *controlClient) run(ctx context.Context, r *controlRequest, stdout, stderr io.Writer) error {
	if err := cl.send(r); err != nil {
		return fmt.Errorf("control socket %s: %v", cl.socket, err)
	}
	stop := context.AfterFunc(ctx, func() {
		sig := "SIGINT"
		if se := (*signalError)(nil); errors.As(context.Cause(ctx), &se) && se.sig == syscall.SIGTERM {
			sig = "SIGTERM"
		}
		_ = cl.send(&controlRequest{Op: "cancel", Signal: sig})
		cl.c.SetReadDeadline(time.Now().Add(controlCancelWait))
	})
	defer stop()
	var outErr error
	for {
		f, err := cl.read()
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("the server (process %d) stopped answering on %s: %v", cl.hello.PID, cl.socket, err)
		}
		switch f.Type {
		case "stdout":
			if _, err := stdout.Write(f.Data); err != nil && outErr == nil {
				outErr = err
			}
		case "stderr":
			stderr.Write(f.Data)
		case "file_begin":
			if err := cl.receiveFile(f.Path, r.client.files); err != nil {
				return err
			}
		case "exit":
			if f.Exit == nil {
				return fmt.Errorf("control socket %s: an exit line without a status", cl.socket)
			}
			return remoteOutcome(f.Exit, outErr)
		case "error":
			msg := "(no reason given)"
			if f.Err != nil {
				msg = f.Err.Message
			}
			return fmt.Errorf("difctl serve (process %d, control socket %s) refused the %s: %s", cl.hello.PID, cl.socket, r.Op, msg)
		}
		// Other types are a newer server's: ignored.
	}
}

// remoteOutcome is the command's error for the exit of the check the
// server ran: nil for status 0, else its status and line (nothing more to
// print when it has none); outErr is a failure to write the output here.
func remoteOutcome(ex *controlExit, outErr error) error {
	switch {
	case outErr != nil:
		return fmt.Errorf("write output: %w", outErr)
	case ex.Status == exitOK:
		return nil
	case ex.Error == "":
		return &exitError{code: ex.Status}
	}
	return &exitError{code: ex.Status, err: &remoteError{msg: ex.Error, damaged: ex.File}}
}

// remoteError is the failure of a check a server ran, as it reported it:
// main prints its line and, with --json, names its damaged file.
type remoteError struct{ msg, damaged string }

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) file() string  { return e.damaged }

// errFileAborted is a file the server stopped sending.
var errFileAborted = errors.New("the server stopped writing it")

// receiveFile writes the file path the server sends, if it is one of
// files (the command's --badblocks, --mapfile), as the command on its own
// writes it (writeFileWith), and tells the server how that went.
func (cl *controlClient) receiveFile(path string, files []string) error {
	if !slices.Contains(files, path) {
		return fmt.Errorf("control socket %s: the server sent the file %q, which the command did not ask for", cl.socket, path)
	}
	ended, aborted := false, false
	var readErr error
	next := func(w io.Writer) error {
		for {
			f, err := cl.read()
			if err != nil {
				readErr = err
				return err
			}
			switch {
			case f.Path != path && (f.Type == "file" || f.Type == "file_end" || f.Type == "file_abort"):
				readErr = fmt.Errorf("a line of the file %q inside %q", f.Path, path)
				return readErr
			case f.Type == "file":
				if _, err := w.Write(f.Data); err != nil {
					return err // writeFileWith reports it
				}
			case f.Type == "file_end":
				ended = true
				return nil
			case f.Type == "file_abort":
				ended, aborted = true, true
				return errFileAborted
			default:
				readErr = fmt.Errorf("a %q line inside the file %q", f.Type, path)
				return readErr
			}
		}
	}
	werr := writeFileWith(path, next)
	for !ended && readErr == nil {
		next(io.Discard) // not created: the rest is read and dropped
	}
	switch {
	case readErr != nil:
		return fmt.Errorf("control socket %s: %v", cl.socket, readErr)
	case aborted:
		return nil // the server reports why
	}
	done := &controlRequest{Op: "file_done", Path: path}
	if werr != nil {
		done.Error = shortMessage(werr)
	}
	if err := cl.send(done); err != nil {
		return fmt.Errorf("control socket %s: %v", cl.socket, err)
	}
	return nil
}
