package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/nbd"
	"github.com/difctl/difctl/store"
	"github.com/spf13/cobra"
)

// serveOptions are the inputs of runServe.
type serveOptions struct {
	globalOptions
	Images []string
	// ExportNames are --export-name, one per image in order; none: each
	// image's file name (exportNames).
	ExportNames []string
	Store       string // one image only
	Socket      string // unix socket path; default IMAGE.sock of the first image
	Listen      string // HOST:PORT instead of a socket
	Insecure    bool   // TCP without TLS
	ReadOnly    bool
	// DevicePI (--device-pi): every IMAGE must be an NVMe namespace with
	// PI of its volume's format, written with the volume's tuples as its
	// PI (volume_pi.go); without it, those that are are.
	DevicePI bool
	NoRepair bool // --no-repair: reads fail rather than repair from the legs
	TLSCert  string
	TLSKey   string
	ClientCA string // verify client certificates against these CAs
	MaxConns int
	// The server's limits against clients that hold slots doing nothing
	// (nbd.Options): zero values are nbd's defaults, except IdleTimeout,
	// where a negative value keeps idle connections.
	IdleTimeout, MaxIdle, HandshakeTimeout time.Duration
	MaxHandshakes, MaxHandshakesPerPeer    int
	// KeyedCRC computes the guards and sector sums of a keyed volume's
	// reads too (blockdev.Options.KeyedCRC).
	KeyedCRC bool
	// TupleCache is the tuple page cache of each volume, in bytes.
	TupleCache int64
	// StoreCache and MemTable are the store engine's block cache and
	// memtable size of each volume, in bytes.
	StoreCache, MemTable int64
	// Control is --control, the control socket of every image ("": the
	// default, STORE.ctl beside each image's Pebble store); NoControl is
	// --no-control (or --control ''): none.
	Control   string
	NoControl bool
	// ControlLimits bound the control socket's clients (zero: the
	// defaults); ControlUID, if not nil, is the user a client must be
	// instead of the server's (tests).
	ControlLimits controlLimits
	ControlUID    *int
	// Ready, if not nil, receives the listening address once clients can
	// connect (tests).
	Ready func(net.Addr)
	metricsOptions
}

// defaultServeTupleCache is the server's fixed budget of decoded tuples per
// volume (nbd.DefaultTupleCacheBytes, 32 MiB: the tuples and sector sums
// of 1.33 GiB of 512-byte blocks, 10.7 GiB of 4 KiB blocks). It used to be
// 64 MiB, which a 512+8 volume fills only from 2.7 GiB up, so that the
// resident set grew with the volume (123 MiB at 1 GiB, 168 MiB at 4 GiB).
const defaultServeTupleCache = nbd.DefaultTupleCacheBytes

// defaultServeStoreCache and defaultServeMemTable size the store engine of
// a served volume. The other commands run briefly and take Pebble's large
// settings (64 MiB each); a server runs for days, and its resident set
// should not grow with what clients write and read.
const (
	defaultServeStoreCache = 8 << 20
	defaultServeMemTable   = 8 << 20
)

// serveGCPercent is the Go collector's GOGC while serving, unless the
// environment sets GOGC. The server's live heap is mostly fixed buffers
// (the volumes' write staging, the requests' buffers, the unsynced
// tuples) and it makes little garbage, so the default 100 let the heap
// grow to twice the live heap over a long run of writes (a 4096+8 image:
// 65 MiB live, 130 MiB of heap after 16 GiB written, against 80 MiB after
// 1 GiB), which looked like growth with the volume's size. At 25 the heap
// stays within 1.25 times the live heap; the collector then runs about
// once per 20 MiB of garbage (7 collections in a 16 GiB write at 100).
const serveGCPercent = 25

// serveVolumeOptions are the volume options of a served image. Reads go
// through the device's ReadAt (pread) rather than its mapping, so that the
// mapping's pages (up to 32 MiB, released behind the reads) do not count
// in the server's resident set: 20 MiB of file pages instead of 44 MiB
// after nbdcopy of a 1 GiB image. For throughput it is a wash on this
// 2-vCPU machine: interleaved nbdcopy runs of a page-cached 1 GiB 4096+8
// image took 0.70-0.80 s of server CPU per GiB with pread against
// 0.81-0.90 s through the mapping at load 4-5, and the same within the
// noise at load 6-9 (qemu-nbd: 0.57-0.80 s).
//
// MaxUnsynced is 256 MiB instead of the volume's 1 GiB: the tuples of the
// writes since the last sync, and the store batch that folds them in at
// the sync, scale with it (at 512+8, 1 GiB of unsynced writes is about 20
// MiB of tuples and a 24 MiB batch), and a server syncs that peak again
// every MaxUnsynced of writes. Measured at 512+8 after writing a whole
// 4 GiB image: 130 MiB of RSS against 168 MiB with 1 GiB, for 0-15% of
// write speed in alternating fio runs (a sync every 256 MiB).
func serveVolumeOptions(readOnly bool) blockdev.Options {
	return blockdev.Options{ReadOnly: readOnly, NoMap: true, MaxUnsynced: serveMaxUnsynced}
}

const serveMaxUnsynced = 256 << 20

// serveInFlightBytes bounds each connection's request buffers (the write
// payloads read ahead and the replies of the requests executing) instead
// of nbd's 32 MiB, which a multi-connection client fills on each of its
// connections (nbdcopy: 4 of 16 MiB). 8 MiB still holds 32 requests of
// 256 KiB for the 4 that execute at once.
const serveInFlightBytes = 8 << 20

// serveStoreOptions are the store engine's memory sizes of a served
// volume (zero: serve's defaults).
func serveStoreOptions(o *serveOptions) store.OpenOptions {
	so := store.OpenOptions{CacheBytes: o.StoreCache, MemTableBytes: o.MemTable}
	if so.CacheBytes <= 0 {
		so.CacheBytes = defaultServeStoreCache
	}
	if so.MemTableBytes <= 0 {
		so.MemTableBytes = defaultServeMemTable
	}
	return so
}

func newServeCmd(g *globalOptions) *cobra.Command {
	var o serveOptions
	tc := &sizeFlag{n: defaultServeTupleCache}
	sc := &sizeFlag{n: defaultServeStoreCache}
	mt := &sizeFlag{n: defaultServeMemTable}
	cmd := &cobra.Command{
		Use:   "serve IMAGE...",
		Short: "Serve protected images over NBD, every read verified",
		Long: `Serve each protected IMAGE as an export of a Network Block Device server,
named after its file name (images of the same file name in different
folders: after their paths relative to the working directory; or
--export-name, once per IMAGE in order), so that qemu, nbdfuse, nbdcopy, nbdinfo or the
Linux nbd driver can use it as a disk. Every read is verified against the
store and every write is protected, through the same volume as the other
commands.

A read covering a block that fails verification returns no unverified
byte: clients that negotiate structured replies (qemu, libnbd) get the
verified bytes before it and an I/O error at the first failing byte, the
others an I/O error. The failure is recorded in the store as a finding, as
a scrub records one (difctl inspect shows it, through the server while it runs),
and reported on standard error: the first failure of a kind (export,
operation, offset and length; clients retry a failed read several times),
then "N more like it" for its repeats at most once a minute, and the
totals refused by export when the server stops. FLUSH and FUA make writes durable with
their tuples before the reply; TRIM and WRITE_ZEROES make whole blocks
unwritten (zeros).

By default the server listens on the unix socket IMAGE.sock (of the first
IMAGE), created with mode 0600. --listen HOST:PORT listens on TCP instead,
which needs TLS (--tls-cert and --tls-key; --tls-client-ca to require and
verify client certificates) or an explicit --insecure. A line on standard
error says where to connect (an nbd+unix:// or nbd:// URI). A client whose
TLS handshake fails (a certificate of another CA, none, ...) gets a line
on standard error with the reason, at most 10 lines a minute.

SIGINT or SIGTERM stops accepting connections, lets the requests in flight
finish, syncs every volume and closes the stores (exit 32, plus 4 if reads
or writes failed verification while serving).

The server holds each image's store, so difctl verify, scrub and inspect
of a served image cannot open it; they ask the server instead, on its
control socket, to run them on the volume it serves, while it goes on
serving: the same output and exit status as on their own, a scrub's
findings in the store's findings log and, with the outcome of every
check, in the server's log (standard error). The control socket is
STORE.ctl beside each image's Pebble store (IMAGE.difdb.ctl by default),
or --control PATH for every image (other stores have none without it);
--no-control makes none. It is created with mode 0600, answers only the
user the server runs as, and is removed at exit; a stale one left by a
killed server is replaced. SIGUSR1 scrubs every served image in turn, as
difctl scrub IMAGE would, with the report in the server's log.

A keyed volume (protect --key-file) is served with its key (--key-file or
--key-env): every read checks the blocks' keyed tags too, and writes,
trims and write-zeroes produce new ones. Without the key it is served
read-only (writes fail with EPERM) with the keyed check skipped, as
difctl verify does without the key, and a line on standard error says so.
The key given is that of every IMAGE; an IMAGE that is not keyed is then
refused. A read whose blocks all verify their keyed tags (and their tag
pages' MACs) does not recompute their CRC guards and sector sums, which the
tags prove; only reads where anything fails do, to report each failure as
before. --keyed-crc computes them on every read.

` + exitCodesHelp(exitOK, exitUncorrected, exitOperational, exitUsage, exitCancelled),
		Example: `  difctl serve disk.img                      # nbd+unix:///disk.img?socket=disk.img.sock
  nbdfuse mnt/disk --unix disk.img.sock &     # then: losetup, mkfs.ext4, mount
  qemu-system-x86_64 -drive file=nbd+unix:///disk.img?socket=disk.img.sock,format=raw
  difctl serve --listen :10809 --tls-cert srv.pem --tls-key srv.key a.img b.img`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("%s takes IMAGE...", cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("control") && o.Control == "" {
				o.NoControl = true
			}
			o.globalOptions, o.Images, o.TupleCache = *g, args, int64(tc.n)
			o.StoreCache, o.MemTable = int64(sc.n), int64(mt.n)
			return runServe(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.ExportNames, "export-name", nil, "the export `NAME` of an IMAGE: once per IMAGE, in order (default the file name, or the path when file names repeat)")
	f.StringVar(&o.Socket, "socket", "", "listen on the unix socket `PATH`, mode 0600 (default IMAGE.sock of the first IMAGE)")
	f.StringVar(&o.Listen, "listen", "", "listen on TCP `HOST:PORT` instead (needs TLS or --insecure)")
	f.StringVar(&o.Control, "control", "", "the control socket `PATH` on which verify, scrub and inspect of the served images ask the server to run them, mode 0600 (default STORE.ctl beside each image's Pebble store; '' for none)")
	f.BoolVar(&o.NoControl, "no-control", false, "make no control socket (verify, scrub and inspect of a served image then find its store busy)")
	f.BoolVar(&o.Insecure, "insecure", false, "allow --listen without TLS")
	f.BoolVar(&o.ReadOnly, "read-only", false, "refuse writes, trims and write-zeroes (EPERM)")
	f.BoolVar(&o.DevicePI, "device-pi", false, "every IMAGE must be an NVMe namespace with PI of its volume's format, whose blocks are written with the volume's tuples as their PI for the device to check (done on its own for the images that are; docs/device-pi.md)")
	f.BoolVar(&o.NoRepair, "no-repair", false, "never repair a failing block of a mirrored image from its legs: the read fails (EIO), as without legs")
	f.StringVar(&o.TLSCert, "tls-cert", "", "server certificate `FILE` (PEM); makes TLS mandatory")
	f.StringVar(&o.TLSKey, "tls-key", "", "server private key `FILE` (PEM)")
	f.StringVar(&o.ClientCA, "tls-client-ca", "", "require client certificates signed by the CAs in `FILE` (PEM)")
	f.IntVar(&o.MaxConns, "max-connections", nbd.DefaultMaxConnections, "connections at once per export")
	f.DurationVar(&o.IdleTimeout, "idle-timeout", nbd.DefaultIdleTimeout, "when an export is full, a new client takes the slot of a connection idle this long (0: never)")
	f.DurationVar(&o.MaxIdle, "max-idle", 0, "close any connection idle this long, whatever the load (0: never)")
	f.IntVar(&o.MaxHandshakes, "max-handshakes", nbd.DefaultMaxHandshakes, "connections negotiating at once")
	f.IntVar(&o.MaxHandshakesPerPeer, "max-handshakes-per-peer", nbd.DefaultMaxHandshakesPerPeer, "connections negotiating at once from one peer (IP address, IPv6 /64, or unix-socket user)")
	f.DurationVar(&o.HandshakeTimeout, "handshake-timeout", nbd.DefaultHandshakeTimeout, "time a connection may take to negotiate")
	f.Var(tc, "tuple-cache", "decoded tuples kept in memory per volume, for random reads: a fixed budget, whatever the volume's size (`SIZE`, 12 bytes per block; 0: the default)")
	f.Var(sc, "store-cache", "the store's block cache per volume (`SIZE`; Pebble; 0: the default)")
	f.Var(mt, "store-memtable", "the store's memtable per volume: unflushed store writes held in memory (`SIZE`, at least 1MiB; Pebble)")
	addKeyFlags(cmd, &g.Key, "check the keyed tags on reads and produce them on writes (without it a keyed volume is served read-only, its keyed check skipped)")
	f.BoolVar(&o.KeyedCRC, "keyed-crc", false, "with the key: compute every read block's CRC guard and sector sum too, not only where a keyed tag fails")
	f.StringVar(&o.Store, "store", "", "store `URL` of a single IMAGE: pebble:PATH, mem: or etcd://HOST:PORT,.../PREFIX (default pebble:IMAGE.difdb)")
	addMetricsFlag(cmd, &o.metricsOptions)
	return cmd
}

// checkServe validates the flags before anything is opened.
func checkServe(o *serveOptions) error {
	switch {
	case o.Store != "" && len(o.Images) > 1:
		return usageErrorf("--store names the store of one IMAGE; each of several images keeps its own (IMAGE.difdb)")
	case o.Listen != "" && o.Socket != "":
		return usageErrorf("--socket and --listen exclude each other")
	case o.NoControl && o.Control != "":
		return usageErrorf("--control and --no-control exclude each other")
	case o.DevicePI && o.ReadOnly:
		return usageErrorf("--device-pi is for the writes of the served images: leave out --read-only")
	case (o.TLSCert == "") != (o.TLSKey == ""):
		return usageErrorf("--tls-cert and --tls-key go together")
	case o.ClientCA != "" && o.TLSCert == "":
		return usageErrorf("--tls-client-ca needs --tls-cert and --tls-key")
	case o.Listen != "" && o.TLSCert == "" && !o.Insecure:
		return usageErrorf("--listen without TLS sends the disk in clear text to anyone who connects: give --tls-cert and --tls-key, or --insecure")
	case o.Key.Witness != "" && len(o.Images) > 1:
		return usageErrorf("--witness keeps the seal of one IMAGE; serve several images with a witness each from several commands")
	case o.KeyedCRC && o.Key.File == "" && o.Key.Env == "":
		return usageErrorf("--keyed-crc needs the key (--key-file or --key-env)")
	case o.MaxConns < 1:
		return usageErrorf("--max-connections must be at least 1")
	case o.IdleTimeout < 0 || o.MaxIdle < 0 || o.HandshakeTimeout < 0:
		return usageErrorf("--idle-timeout, --max-idle and --handshake-timeout cannot be negative")
	case o.MaxHandshakes < 0 || o.MaxHandshakesPerPeer < 0:
		return usageErrorf("--max-handshakes and --max-handshakes-per-peer cannot be negative")
	case o.MemTable != 0 && (o.MemTable < 1<<20 || o.MemTable >= 4<<30):
		return usageErrorf("--store-memtable must be at least 1MiB and less than 4GiB")
	}
	_, err := exportNames(o.Images, o.ExportNames)
	return err
}

// maxExportName is the NBD protocol's limit on an export name, in bytes.
const maxExportName = 4096

// exportNames names the export of each image: names (--export-name) when
// given, one per image; else the image's file name, or, for images whose
// file names repeat (a/disk.img, b/disk.img), their paths relative to the
// working directory (absolute when outside it). Two exports of one name
// are a usage error.
func exportNames(images, names []string) ([]string, error) {
	out := make([]string, len(images))
	if len(names) > 0 {
		if len(names) != len(images) {
			return nil, usageErrorf("--export-name is given %d times for %d images: give it once per IMAGE, in order", len(names), len(images))
		}
		copy(out, names)
	} else {
		count := map[string]int{}
		for _, im := range images {
			count[filepath.Base(im)]++
		}
		wd, _ := os.Getwd()
		for i, im := range images {
			out[i] = filepath.Base(im)
			if count[out[i]] == 1 {
				continue
			}
			abs, err := filepath.Abs(im)
			if err != nil {
				return nil, err
			}
			out[i] = filepath.ToSlash(abs)
			if rel, err := filepath.Rel(wd, abs); err == nil && wd != "" && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
				out[i] = filepath.ToSlash(rel)
			}
		}
	}
	seen := map[string]string{}
	for i, name := range out {
		switch {
		case name == "":
			return nil, usageErrorf("--export-name must not be empty")
		case len(name) > maxExportName:
			return nil, usageErrorf("export name of %s is longer than NBD's %d bytes", images[i], maxExportName)
		}
		if prev, dup := seen[name]; dup {
			return nil, usageErrorf("%s and %s would both be the export %q: give --export-name", prev, images[i], name)
		}
		seen[name] = images[i]
	}
	return out, nil
}

func runServe(ctx context.Context, o serveOptions, _, stderr io.Writer) error {
	if err := checkServe(&o); err != nil {
		return err
	}
	tcfg, err := tlsConfig(&o)
	if err != nil {
		return err
	}
	var vols []*volume
	defer func() {
		for _, v := range vols {
			v.Close()
		}
	}()
	m, err := startMetrics(o.metricsOptions, o.Quiet, stderr)
	if err != nil {
		return err
	}
	defer m.close()
	key, err := o.Key.load()
	if err != nil {
		return err
	}
	names, err := exportNames(o.Images, o.ExportNames)
	if err != nil {
		return err
	}
	// SIGUSR1 scrubs the volumes, once they are open; until then it waits
	// here rather than kill the process.
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
	var exports []nbd.Export
	var svols []*servedVolume
	for i, im := range o.Images {
		mode := storeWrite
		if o.ReadOnly {
			mode = storeRead
		}
		vo := serveVolumeOptions(o.ReadOnly)
		w, release, err := o.Key.openWitness()
		if err != nil {
			return err
		}
		vo.Key, vo.KeyedCRC, vo.Witness, vo.NoRepair = key, o.KeyedCRC, w, o.NoRepair
		vo.OnRepair = func(p blockdev.Problem) {
			if !o.Quiet {
				fmt.Fprintf(stderr, "difctl: %s: block %d (%s) repaired from %s\n", im, p.LBA, kindName(p.Kind), p.Source)
			}
		}
		v, err := openVolumeWith(ctx, im, storeURL(im, o.Store), mode, vo, m.storeOptions(names[i], serveStoreOptions(&o)), devicePIMode(o.DevicePI))
		if err != nil {
			release()
			return err
		}
		v.release = release
		vols = append(vols, v)
		m.volume(names[i], v.vol)
		// A keyed volume without its key could not produce valid tags:
		// it is served read-only (the volume refuses changes anyway).
		ro := o.ReadOnly || servedWithoutKey(v.vol)
		if v.pi != nil && !o.Quiet {
			fmt.Fprintf(stderr, "difctl: %s is an NVMe namespace with PI of its volume's format: the volume's tuples are written as its PI, which the device checks\n", im)
		}
		if servedWithoutKey(v.vol) {
			fmt.Fprintf(stderr, "difctl: %s is a keyed volume and no key was given (--key-file or --key-env): serving it read-only, with its keyed check skipped (tuples and sector checksums are verified)\n", im)
		}
		exports = append(exports, nbd.Export{Name: names[i], Volume: v.vol, ReadOnly: ro, TupleCacheBytes: int(o.TupleCache),
			Description: fmt.Sprintf("difctl protected image %s (%s)", im, v.format())})
		abs, err := filepath.Abs(im)
		if err != nil {
			return err
		}
		svols = append(svols, &servedVolume{v: v, image: im, storeFlag: o.Store, abs: abs, url: v.url, absURL: absStoreURL(v.url),
			export: names[i], readOnly: mode == storeRead})
	}
	uid := os.Geteuid()
	if o.ControlUID != nil {
		uid = *o.ControlUID
	}
	ctl := newControlServer(svols, key, stderr, o.Quiet, o.ControlLimits, uid)
	defer ctl.close() // before the volumes close: its checks use them
	if err := ctl.start(&o); err != nil {
		return err
	}
	usr1Done := make(chan struct{})
	defer close(usr1Done)
	go func() {
		for {
			select {
			case <-usr1:
				ctl.scrubAll("SIGUSR1")
			case <-usr1Done:
				return
			}
		}
	}()
	if _, set := os.LookupEnv("GOGC"); !set {
		defer debug.SetGCPercent(debug.SetGCPercent(serveGCPercent))
	}
	var failed atomic.Int64
	hl := newHandshakeLog(stderr)
	defer hl.flush()
	fl := newFailureLog(stderr)
	defer fl.summary()
	srv, err := nbd.NewServer(exports, m.nbdOptions(exports, nbd.Options{
		TLS: tcfg, MaxConnections: o.MaxConns, OnConnError: hl.connError, MaxInFlightBytes: serveInFlightBytes,
		IdleTimeout: idleTimeout(o.IdleTimeout), MaxIdle: o.MaxIdle, HandshakeTimeout: o.HandshakeTimeout,
		MaxHandshakes: o.MaxHandshakes, MaxHandshakesPerPeer: min(o.MaxHandshakesPerPeer, o.MaxHandshakes),
		OnFailure: func(f nbd.Failure) {
			failed.Add(1)
			fl.failure(f)
		},
	}))
	if err != nil {
		return err
	}
	var l net.Listener
	if o.Listen != "" {
		l, err = net.Listen("tcp", o.Listen)
	} else {
		if o.Socket == "" {
			o.Socket = o.Images[0] + ".sock"
		}
		l, err = listenUnix(o.Socket)
	}
	if err != nil {
		return fmt.Errorf("listen: %w", unwrapPath(err))
	}
	if !o.Quiet {
		for _, e := range exports {
			fmt.Fprintf(stderr, "difctl: serving %s at %s\n", e.Name, exportURI(l.Addr(), e.Name, tcfg != nil))
		}
	}
	if o.Ready != nil {
		o.Ready(l.Addr())
	}
	serr := srv.Serve(ctx, l)
	// Whatever ended the serving, the checks of the control socket are
	// stopped, what clients wrote is made durable and the stores are
	// closed.
	ctl.close()
	var errs []error
	if serr != nil {
		errs = append(errs, serr)
	}
	for _, v := range vols {
		if err := v.vol.Sync(); err != nil {
			errs = append(errs, fmt.Errorf("sync %s: %s", v.image, storeCause(err)))
		}
		if err := v.Close(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %s", v.image, storeCause(err)))
		}
	}
	vols = nil
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if failed.Load() > 0 {
		return &exitError{code: exitUncorrected}
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// servedWithoutKey reports whether v is a keyed volume opened without its
// key, which serve exports read-only.
func servedWithoutKey(v *blockdev.Volume) bool { return v.Keyed() && !v.KeyedChecked() }

// idleTimeout maps --idle-timeout to nbd.Options.IdleTimeout: 0 there is
// the default, and "never" is negative.
func idleTimeout(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
