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
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/store"
)

// The server's side of the control socket (control.go): it listens, checks
// who connects, reads one request, runs the check on the served volume
// and forwards its output; SIGUSR1 runs a scrub of every served volume
// with its report in the server's log.

// controlLimits bound what a client of the control socket may hold; zero
// fields take the defaults.
type controlLimits struct {
	// Request is the time a client has to send its request once
	// connected. Default 10 seconds.
	Request time.Duration
	// Write is the time a client has to take each line the server sends
	// (a client that stops reading loses its check). Default 30 seconds.
	Write time.Duration
	// MaxConns is the connections served at once; more are refused.
	// Default 16.
	MaxConns int
}

func (l controlLimits) withDefaults() controlLimits {
	if l.Request <= 0 {
		l.Request = 10 * time.Second
	}
	if l.Write <= 0 {
		l.Write = 30 * time.Second
	}
	if l.MaxConns <= 0 {
		l.MaxConns = 16
	}
	return l
}

// errServerStopping cancels the checks of a server that stops.
var errServerStopping = errors.New("difctl serve is stopping: the check was cancelled (run it again once the image is served again, or after the server has stopped)")

// errClientGone cancels the check of a client that closed its connection.
var errClientGone = errors.New("the client closed its control connection")

// servedVolume is a volume serve serves, as its control socket knows it.
type servedVolume struct {
	v         *volume
	image     string // as serve was given it
	storeFlag string // serve's --store, "" for the default
	abs       string // the image's absolute path
	url       string // the store URL serve opened
	absURL    string // the same, a Pebble path made absolute
	export    string
	readOnly  bool // the store is open read-only (--read-only)

	mu       sync.Mutex
	scrubber string // who runs a scrub of the volume, "" when none does
}

// startScrub marks a scrub of sv by who as running, unless one is: a
// second scrub would share the first's cursor.
func (sv *servedVolume) startScrub(who string) (running string, ok bool) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if sv.scrubber != "" {
		return sv.scrubber, false
	}
	sv.scrubber = who
	return "", true
}

func (sv *servedVolume) endScrub() {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	sv.scrubber = ""
}

// controlServer runs the checks asked for on serve's control sockets and
// by SIGUSR1.
type controlServer struct {
	vols  []*servedVolume
	key   *blockdev.Key // serve's key, nil without
	log   io.Writer     // serve's standard error
	quiet bool
	lim   controlLimits
	uid   int // the user a client must be

	ctx   context.Context // of the checks: cancelled when the server stops
	stop  context.CancelCauseFunc
	slots chan struct{}
	wg    sync.WaitGroup // accept loops, connections, SIGUSR1 scrubs

	mu     sync.Mutex
	closed bool
	ls     []net.Listener
	conns  map[net.Conn]bool // true while the connection's check runs
}

func newControlServer(vols []*servedVolume, key *blockdev.Key, log io.Writer, quiet bool, lim controlLimits, uid int) *controlServer {
	lim = lim.withDefaults()
	ctx, stop := context.WithCancelCause(context.Background())
	return &controlServer{vols: vols, key: key, log: log, quiet: quiet, lim: lim, uid: uid,
		ctx: ctx, stop: stop, slots: make(chan struct{}, lim.MaxConns), conns: map[net.Conn]bool{}}
}

// start listens where o says: --control, or beside each volume's Pebble
// store by default, or nowhere with --no-control. A socket --control
// names that cannot be made fails the server; a default one is reported
// and done without.
func (s *controlServer) start(o *serveOptions) error {
	switch {
	case o.NoControl:
		return nil
	case o.Control != "":
		if err := s.listen(o.Control); err != nil {
			return fmt.Errorf("control socket: %w", unwrapPath(err))
		}
		s.announce(o.Control, "")
		return nil
	}
	for _, sv := range s.vols {
		p := controlPath(sv.url)
		if p == "" {
			if !s.quiet {
				fmt.Fprintf(s.log, "difctl: %s: no control socket: its store is not a Pebble directory (serve --control PATH makes one)\n", sv.image)
			}
			continue
		}
		if err := s.listen(p); err != nil {
			fmt.Fprintf(s.log, "difctl: %s: no control socket: %s (verify, scrub and inspect of it find its store busy)\n", sv.image, shortMessage(unwrapPath(err)))
			continue
		}
		s.announce(p, sv.image)
	}
	return nil
}

func (s *controlServer) announce(path, image string) {
	if s.quiet {
		return
	}
	if image == "" {
		fmt.Fprintf(s.log, "difctl: control socket at %s (verify, scrub and inspect of the served images)\n", path)
		return
	}
	fmt.Fprintf(s.log, "difctl: control socket at %s (verify, scrub and inspect of %s)\n", path, image)
}

// listen accepts connections on a unix socket at path (listenUnix).
func (s *controlServer) listen(path string) error {
	l, err := listenUnix(path)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		l.Close()
		return errServerStopping
	}
	s.ls = append(s.ls, l)
	s.wg.Add(1)
	go s.accept(l)
	return nil
}

func (s *controlServer) accept(l net.Listener) {
	defer s.wg.Done()
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // out of descriptors, say
			continue
		}
		if !s.track(c) {
			c.Close()
			return
		}
		select {
		case s.slots <- struct{}{}:
			go func() {
				defer s.untrack(c)
				defer func() { <-s.slots }()
				s.serveConn(c)
			}()
		default:
			go func() {
				defer s.untrack(c)
				s.newConn(c).refuse(controlErrTooMany, fmt.Sprintf("the server takes %d control connections at once; try again", s.lim.MaxConns))
			}()
		}
	}
}

// track counts c among the server's connections (and its WaitGroup),
// unless the server is closed.
func (s *controlServer) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = false
	s.wg.Add(1)
	return true
}

func (s *controlServer) untrack(c net.Conn) {
	c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.wg.Done()
}

// running marks c's check as running: close then lets it end first.
func (s *controlServer) running(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = true
	return true
}

// close stops listening, cancels the checks running and waits for them:
// a check ends at its next run of blocks, and its client is told that the
// server stopped; one whose client does not read is cut off after a
// grace period.
func (s *controlServer) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	for _, l := range s.ls {
		l.Close()
	}
	for c, busy := range s.conns {
		if !busy {
			c.Close() // still to send its request
		}
	}
	s.mu.Unlock()
	s.stop(errServerStopping)
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-time.After(5 * time.Second):
	}
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	<-done
}

// controlConn is a connection of a client, as the server writes to it.
type controlConn struct {
	c     net.Conn
	write time.Duration // a line's write deadline
	mu    sync.Mutex
	err   error // the first write error: later writes fail with it
}

func (s *controlServer) newConn(c net.Conn) *controlConn {
	return &controlConn{c: c, write: s.lim.Write}
}

// send writes f as one line.
func (cc *controlConn) send(f *controlFrame) error {
	f.V = controlVersion
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.err != nil {
		return cc.err
	}
	cc.c.SetWriteDeadline(controlDeadline(cc.write))
	if _, err := cc.c.Write(b); err != nil {
		cc.err = fmt.Errorf("control client: %w", err)
		cc.c.Close() // a client that does not read loses its connection
	}
	return cc.err
}

// refuse tells the client why its request is refused; the caller closes
// the connection. What the client sent meanwhile is read and dropped for
// a moment (a bounded amount), so that the close does not reset the
// connection before the client has read why.
func (cc *controlConn) refuse(code, msg string) {
	if cc.send(&controlFrame{Type: "error", Err: &controlError{Code: code, Message: msg}}) != nil {
		return
	}
	if uc, ok := cc.c.(*net.UnixConn); ok {
		uc.CloseWrite()
		uc.SetReadDeadline(time.Now().Add(250 * time.Millisecond))
		io.CopyN(io.Discard, uc, 1<<20)
	}
}

// frameWriter is a check's standard output or error, or a file it writes,
// forwarded to the client in frames of typ.
type frameWriter struct {
	cc   *controlConn
	typ  string
	path string
	term bool // the client's standard error is a terminal
}

func (w *frameWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), controlChunk)
		if err := w.cc.send(&controlFrame{Type: w.typ, Path: w.path, Data: p[:k]}); err != nil {
			return n, err
		}
		n, p = n+k, p[k:]
	}
	return n, nil
}

func (w *frameWriter) terminal() bool { return w.term }

// fileWriter returns the served writeFile of a check for the client of cc:
// the file is sent to the client, which writes it as the command on its
// own would (writeFileWith) and says how that went on acks.
func (cc *controlConn) fileWriter(ctx context.Context, acks <-chan *controlRequest) func(string, func(io.Writer) error) error {
	return func(path string, fn func(io.Writer) error) error {
		if err := cc.send(&controlFrame{Type: "file_begin", Path: path}); err != nil {
			return err
		}
		bw := bufio.NewWriterSize(&frameWriter{cc: cc, typ: "file", path: path}, controlChunk)
		err := fn(bw)
		if err == nil {
			err = bw.Flush()
		}
		if err != nil {
			_ = cc.send(&controlFrame{Type: "file_abort", Path: path})
			return fmt.Errorf("write %s: %w", path, err)
		}
		if err := cc.send(&controlFrame{Type: "file_end", Path: path}); err != nil {
			return err
		}
		select {
		case a := <-acks:
			if a.Path != path {
				return fmt.Errorf("write %s: the client confirmed %s instead", path, a.Path)
			}
			if a.Error != "" {
				return errors.New(a.Error) // the client's own error, as it would print it
			}
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(cc.write):
			return fmt.Errorf("write %s: the client did not confirm it within %v", path, cc.write)
		}
	}
}

// serveConn serves one client: its credentials, the hello, its request
// and the check.
func (s *controlServer) serveConn(c net.Conn) {
	cc := s.newConn(c)
	who := "a client"
	if uc, ok := c.(*net.UnixConn); ok {
		uid, pid, known, err := peerCred(uc)
		switch {
		case err != nil:
			fmt.Fprintf(s.log, "difctl: control: refused a client whose credentials do not read: %v\n", err)
			cc.refuse(controlErrPermission, "cannot tell who is asking")
			return
		case known && uid != s.uid:
			fmt.Fprintf(s.log, "difctl: control: refused process %d of user %d (only user %d may ask)\n", pid, uid, s.uid)
			cc.refuse(controlErrPermission, fmt.Sprintf("only user %d may use this control socket", s.uid))
			return
		case known:
			who = fmt.Sprintf("process %d", pid)
		}
	}
	if cc.send(s.hello()) != nil {
		return
	}
	c.SetReadDeadline(controlDeadline(s.lim.Request))
	br := bufio.NewReaderSize(c, 4096)
	req, cerr := readControlRequest(br)
	if cerr != nil {
		cc.refuse(cerr.Code, cerr.Message)
		return
	}
	c.SetReadDeadline(time.Time{})
	sv, cerr := s.volumeFor(req)
	if cerr != nil {
		cc.refuse(cerr.Code, cerr.Message)
		return
	}
	if req.Op == "scrub" {
		if other, ok := sv.startScrub(who); !ok {
			cc.refuse(controlErrScrubbing, fmt.Sprintf("a scrub of %s is running on the server already (for %s); wait for it to finish", sv.image, other))
			return
		}
		defer sv.endScrub()
	}
	if !s.running(c) {
		cc.refuse(controlErrStopping, errServerStopping.Error())
		return
	}
	ctx, cancel := context.WithCancelCause(s.ctx)
	defer cancel(nil)
	acks := make(chan *controlRequest, 1)
	go readControlLines(br, cancel, acks)

	prefix := fmt.Sprintf("difctl: control: %s %s for %s: ", req.Op, sv.image, who)
	log := &logLines{w: s.log, prefix: prefix}
	sd := &served{vol: sv.v, key: s.key, withKey: req.Key, readOnly: sv.readOnly, writeFile: cc.fileWriter(ctx, acks)}
	if !s.quiet {
		sd.log = log
		fmt.Fprintf(s.log, "%sstarted\n", prefix)
	}
	t0 := time.Now()
	err := s.run(ctx, req, sd,
		&frameWriter{cc: cc, typ: "stdout"}, &frameWriter{cc: cc, typ: "stderr", term: req.Terminal})
	log.flush()
	ex := controlExitOf(ctx, err)
	s.logEnd(prefix, ex, time.Since(t0))
	_ = cc.send(&controlFrame{Type: "exit", Exit: ex})
}

// controlExitOf is the exit frame of a check that ended with err, in ctx.
func controlExitOf(ctx context.Context, err error) *controlExit {
	ex := &controlExit{Status: exitCode(ctx, err, true), Error: errorLine(ctx, err)}
	var fe interface{ file() string }
	if errors.As(err, &fe) {
		ex.File = fe.file()
	}
	return ex
}

// logEnd writes the outcome of a check to the log: always when it did
// not pass, and unless quiet when it did.
func (s *controlServer) logEnd(prefix string, ex *controlExit, took time.Duration) {
	if ex.Status == exitOK && s.quiet {
		return
	}
	line := fmt.Sprintf("%sexit %d after %s", prefix, ex.Status, took.Round(time.Millisecond))
	if ex.Error != "" {
		line += ": " + ex.Error
	}
	fmt.Fprintln(s.log, line)
}

// readControlRequest reads a client's request, within the connection's
// read deadline.
func readControlRequest(br *bufio.Reader) (*controlRequest, *controlError) {
	line, err := readLine(br, maxControlRequest)
	var ne net.Error
	switch {
	case errors.Is(err, errLineTooLong):
		return nil, &controlError{Code: controlErrTooLarge, Message: fmt.Sprintf("a request is at most %d bytes", maxControlRequest)}
	case errors.As(err, &ne) && ne.Timeout():
		return nil, &controlError{Code: controlErrTimeout, Message: "no request in time"}
	case err != nil:
		return nil, &controlError{Code: controlErrBadRequest, Message: "no request: " + err.Error()}
	}
	var req controlRequest
	if err := json.Unmarshal(line, &req); err != nil {
		return nil, &controlError{Code: controlErrBadRequest, Message: "not a request: " + err.Error()}
	}
	switch {
	case req.V != controlVersion:
		return nil, &controlError{Code: controlErrVersion, Message: fmt.Sprintf("protocol version %d asked, the server speaks %d: use the same difctl for both", req.V, controlVersion)}
	case !slices.Contains([]string{"verify", "scrub", "inspect", "resync", "mirror-list"}, req.Op):
		return nil, &controlError{Code: controlErrBadRequest, Message: fmt.Sprintf("unknown op %q: want verify, scrub, inspect, resync or mirror-list", req.Op)}
	case req.ImagePath == "" || req.StorePath == "" || req.Image == "":
		return nil, &controlError{Code: controlErrBadRequest, Message: "the request names no image or store"}
	}
	return &req, nil
}

// readControlLines reads the client's lines while its check runs: a
// cancellation, or the outcome of a file (to acks). Anything else, or the
// end of the connection, cancels the check.
func readControlLines(br *bufio.Reader, cancel context.CancelCauseFunc, acks chan<- *controlRequest) {
	for {
		line, err := readLine(br, maxControlRequest)
		if err != nil {
			cancel(errClientGone)
			return
		}
		var r controlRequest
		if err := json.Unmarshal(line, &r); err != nil || r.V != controlVersion {
			cancel(errors.New("the client sent a line that is not a control request"))
			return
		}
		switch r.Op {
		case "cancel":
			cancel(&signalError{sig: signalNamed(r.Signal)})
		case "file_done":
			select {
			case acks <- &r:
			default: // not asked for: dropped
			}
		default:
			cancel(fmt.Errorf("the client sent op %q while its check ran", r.Op))
			return
		}
	}
}

// signalNamed is the signal a client names in its cancellation.
func signalNamed(name string) os.Signal {
	if name == "SIGTERM" {
		return syscall.SIGTERM
	}
	return os.Interrupt
}

// hello is the server's first line: who it is and what it serves.
func (s *controlServer) hello() *controlFrame {
	f := &controlFrame{Type: "hello", Server: "difctl " + currentVersion().Version, PID: os.Getpid()}
	for _, sv := range s.vols {
		m := sv.v.vol.Manifest()
		cv := controlVolume{Export: sv.export, Image: sv.abs, Store: store.RedactURL(sv.absURL), ReadOnly: sv.readOnly, Keyed: m.Keyed()}
		if m.Keyed() {
			cv.VolumeUID, cv.KeyCheck, cv.KeyHeld = m.VolumeUID, m.KeyCheck, sv.v.vol.KeyedChecked()
		}
		f.Volumes = append(f.Volumes, cv)
	}
	return f
}

// volumeFor returns the served volume a request names: the same image
// file with the same store.
func (s *controlServer) volumeFor(req *controlRequest) (*servedVolume, *controlError) {
	fi, err := os.Stat(req.ImagePath)
	var names []string
	for _, sv := range s.vols {
		names = append(names, sv.image)
		if err != nil || !sameFile(fi, sv.abs) || !sameStore(req.StorePath, sv.absURL) {
			continue
		}
		return sv, nil
	}
	url := storeURL(req.Image, req.Store)
	return nil, &controlError{Code: controlErrNotServed, Message: fmt.Sprintf("%s with the store %s is not served here (this server serves %s)", req.Image, store.RedactURL(url), strings.Join(names, ", "))}
}

// sameFile reports whether path is the file fi describes.
func sameFile(fi os.FileInfo, path string) bool {
	gi, err := os.Stat(path)
	return err == nil && os.SameFile(fi, gi)
}

// sameStore reports whether the store URLs a and b (Pebble paths
// absolute) name the same store: the same directory for Pebble, the same
// URL otherwise.
func sameStore(a, b string) bool {
	pa, pb := storePath(a), storePath(b)
	if pa == "" || pb == "" {
		return a == b
	}
	fa, err := os.Stat(pa)
	return err == nil && sameFile(fa, pb)
}

// absStoreURL is url with a Pebble store's path made absolute.
func absStoreURL(url string) string {
	p := storePath(url)
	if p == "" {
		return url
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return url
	}
	return "pebble:" + abs
}

// run runs the check req asks for on the served volume of sd, as the
// command's run function with its output on stdout and stderr.
func (s *controlServer) run(ctx context.Context, req *controlRequest, sd *served, stdout, stderr io.Writer) error {
	g := globalOptions{JSON: req.JSON, Quiet: req.Quiet, ProgressJSON: req.ProgressJSON, Args: req.Args}
	var rng rangeFlag
	if req.Range != "" {
		if err := rng.Set(req.Range); err != nil {
			return usageErrorf("--range: %v", err)
		}
	}
	switch req.Op {
	case "verify":
		o := verifyOptions{globalOptions: g, Image: req.Image, Range: rng, Store: req.Store, served: sd, From: req.From}
		return runVerify(ctx, o, stdout, stderr)
	case "scrub":
		a := req.Scrub
		if a == nil {
			a = &controlScrubArgs{Rereads: defaultScrubRereads}
		}
		o := scrubOptions{globalOptions: g, Image: req.Image, Range: rng, Store: req.Store, served: sd,
			Workers: a.Workers, Rate: a.Rate, Restart: a.Restart, ErrorsOnly: a.ErrorsOnly, Uncached: a.Uncached,
			Rereads: a.Rereads, Badblocks: a.Badblocks, BadblocksBS: a.BadblocksBS, Mapfile: a.Mapfile,
			Repair: a.Repair, From: req.From}
		if err := o.check(); err != nil {
			return err
		}
		if err := o.checkRepair(); err != nil {
			return err
		}
		return checkParity(ctx, o, runScrub(ctx, o, stdout, stderr), stdout)
	case "resync":
		return runResync(ctx, mirrorOptions{globalOptions: g, Image: req.Image, Store: req.Store, served: sd}, stdout, stderr)
	case "mirror-list":
		return runMirrorList(ctx, mirrorOptions{globalOptions: g, Image: req.Image, Store: req.Store, served: sd, op: req.Op}, stdout, stderr)
	case "inspect":
		o := inspectOptions{globalOptions: g, Image: req.Image, LBA: -1, Store: req.Store, served: sd}
		if a := req.Inspect; a != nil && a.LBA >= 0 {
			if a.Count < 1 {
				return usageErrorf("--count must be at least 1")
			}
			o.LBA, o.Count = a.LBA, a.Count
		}
		return runInspect(ctx, o, stdout, stderr)
	}
	return usageErrorf("unknown op %q", req.Op)
}

// scrubAll scrubs every served volume in turn, as difctl scrub IMAGE
// would (resuming a stopped pass), with the report in the log: serve's
// SIGUSR1. A volume served read-only, or already being scrubbed, is
// skipped with a line saying so.
func (s *controlServer) scrubAll(why string) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		for _, sv := range s.vols {
			if s.ctx.Err() != nil {
				return
			}
			prefix := fmt.Sprintf("difctl: %s: scrub %s: ", why, sv.image)
			if sv.readOnly {
				fmt.Fprintf(s.log, "%sskipped: served read-only, its store opened read-only\n", prefix)
				continue
			}
			if other, ok := sv.startScrub(why); !ok {
				fmt.Fprintf(s.log, "%sskipped: a scrub of it is running (for %s)\n", prefix, other)
				continue
			}
			log := &logLines{w: s.log, prefix: prefix}
			req := &controlRequest{Op: "scrub", Image: sv.image, Store: sv.storeFlag}
			sd := &served{vol: sv.v, key: s.key, readOnly: sv.readOnly}
			t0 := time.Now()
			err := s.run(s.ctx, req, sd, log, log)
			log.flush()
			sv.endScrub()
			s.logEnd(prefix, controlExitOf(s.ctx, err), time.Since(t0))
		}
	}()
}
