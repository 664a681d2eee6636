package etcd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/blockdev/scrub"
	"github.com/difctl/difctl/dif"
)

const (
	wlBlockSize = 4096
	wlBlocks    = 2048 // an 8 MiB image
)

// wlData is block lba's content as written by generation gen (gen 0: the
// zeros the image starts with).
func wlData(lba int64, gen uint32) []byte {
	b := make([]byte, wlBlockSize)
	if gen == 0 {
		return b
	}
	r := rand.New(rand.NewPCG(uint64(lba), uint64(gen)))
	for i := 0; i < len(b); i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// ledger tracks what a writer was told is durable: acked is each block's
// generation as of the last successful Sync, tried the generations written
// to it since (which a crash may or may not keep).
type ledger struct {
	mu    sync.Mutex
	acked map[int64]uint32
	tried map[int64][]uint32
	// doubt holds, per block, the generations written by a writeGen that
	// failed (its Sync did not acknowledge them): after the reopen the
	// block may hold any of them or its acknowledged one, until a later
	// acknowledged write of the block settles it. (A later Sync, on the
	// reopened volume, does not acknowledge them: treating it so failed
	// TestVolumeMemberFailures once, a block rolled back to its
	// acknowledged generation after its failed write.)
	doubt map[int64][]uint32
	syncs int
}

func newLedger() *ledger {
	return &ledger{acked: map[int64]uint32{}, tried: map[int64][]uint32{}, doubt: map[int64][]uint32{}}
}

// fail moves the writes tried since the last acknowledgement into doubt.
func (l *ledger) fail() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for lba, gens := range l.tried {
		l.doubt[lba] = append(l.doubt[lba], gens...)
	}
	clear(l.tried)
}

func (l *ledger) try(lba int64, n int, gen uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := lba; i < lba+int64(n); i++ {
		l.tried[i] = append(l.tried[i], gen)
	}
}

func (l *ledger) ack() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for lba, gens := range l.tried {
		l.acked[lba] = gens[len(gens)-1]
		delete(l.doubt, lba)
	}
	clear(l.tried)
	l.syncs++
}

// TestLedgerFailedWrite: a write whose Sync failed is not acknowledged by
// a later Sync (of other blocks, after the reopen): the block keeps its
// acknowledged generation, with the failed one in doubt, until it is
// written and acknowledged again.
func TestLedgerFailedWrite(t *testing.T) {
	l := newLedger()
	l.try(1, 1, 5)
	l.ack()
	l.try(1, 1, 6)
	l.fail()
	l.try(2, 1, 7)
	l.ack()
	if l.acked[1] != 5 || !slices.Equal(l.doubt[1], []uint32{6}) || l.acked[2] != 7 {
		t.Fatalf("after a failed write of block 1: acked %v, doubt %v; want block 1 at 5 with 6 in doubt", l.acked, l.doubt)
	}
	l.try(1, 1, 8)
	l.ack()
	if l.acked[1] != 8 || len(l.doubt[1]) != 0 {
		t.Fatalf("after block 1 was written and acknowledged again: acked %d, doubt %v", l.acked[1], l.doubt[1])
	}
}

// plan returns generation gen's writes: a few runs of blocks.
func plan(gen uint32) [][2]int64 {
	r := rand.New(rand.NewPCG(uint64(gen), 99))
	var runs [][2]int64
	for range 1 + r.IntN(6) {
		n := 1 + r.Int64N(32)
		runs = append(runs, [2]int64{r.Int64N(wlBlocks - n), n})
	}
	return runs
}

// writeGen writes generation gen and syncs; l records it, and on an
// error puts its writes in doubt (ledger.fail).
func writeGen(v *blockdev.Volume, l *ledger, gen uint32) (err error) {
	defer func() {
		if err != nil {
			l.fail()
		}
	}()
	for _, run := range plan(gen) {
		buf := make([]byte, 0, run[1]*wlBlockSize)
		for i := run[0]; i < run[0]+run[1]; i++ {
			buf = append(buf, wlData(i, gen)...)
		}
		l.try(run[0], int(run[1]), gen)
		if _, err := v.WriteAt(buf, run[0]*wlBlockSize); err != nil {
			return err
		}
	}
	if err := v.Sync(); err != nil {
		return err
	}
	l.ack()
	return nil
}

// checkVolume reads every block through the volume (verified) and checks
// it holds its acknowledged generation or a later one that was tried, then
// scrubs the whole volume: no failure of any kind.
func checkVolume(t testing.TB, v *blockdev.Volume, l *ledger) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	buf := make([]byte, wlBlockSize)
	for lba := int64(0); lba < wlBlocks; lba++ {
		if _, err := v.ReadAt(buf, lba*wlBlockSize); err != nil {
			t.Fatalf("read block %d: %v", lba, err)
		}
		ok := slices.Equal(buf, wlData(lba, l.acked[lba]))
		for _, g := range append(l.tried[lba], l.doubt[lba]...) {
			ok = ok || slices.Equal(buf, wlData(lba, g))
		}
		if !ok {
			t.Fatalf("block %d holds neither its acknowledged generation %d nor a later one tried %v or left in doubt by a failure %v", lba, l.acked[lba], l.tried[lba], l.doubt[lba])
		}
	}
	rep, err := scrub.Run(context.Background(), v, scrub.Options{})
	if err != nil {
		t.Fatalf("scrub: %v", err)
	}
	if rep.Failed != 0 || rep.Blocks != wlBlocks {
		t.Fatalf("scrub: %d of %d blocks failed (%v), want 0 of %d", rep.Failed, rep.Blocks, rep.Failures, wlBlocks)
	}
}

// volHandle is an open volume on an etcd store, reopened after failures.
type volHandle struct {
	t   testing.TB
	dev *device.File
	url string
	o   Options
	kv  *kv
	v   *blockdev.Volume
}

func newVolume(t testing.TB, url string, o Options) *volHandle {
	t.Helper()
	dev, err := device.CreateImage(filepath.Join(t.TempDir(), "disk.img"), wlBlocks*wlBlockSize, device.FileOptions{BlockSize: wlBlockSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	h := &volHandle{t: t, dev: dev, url: url, o: o}
	h.kv = openT(t, url, o)
	h.v, err = blockdev.Create(context.Background(), dev, h.kv, blockdev.CreateOptions{Format: dif.MustFormat("4096+8")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.close)
	return h
}

func (h *volHandle) close() {
	if h.v != nil {
		h.v.Close()
		h.v = nil
	}
	if h.kv != nil {
		h.kv.Close()
		h.kv = nil
	}
}

// reopen closes the volume and store and opens them again (recovery runs),
// retrying while the cluster is unavailable.
func (h *volHandle) reopen() error {
	h.close()
	o := h.o
	o.LockWait = 3 * o.LeaseTTL // our own lease, if Close could not revoke it
	deadline := time.Now().Add(60 * time.Second)
	for {
		s, err := Open(h.url, o)
		if err == nil {
			h.kv = s.(*kv)
			h.v, err = blockdev.Open(context.Background(), h.dev, h.kv, blockdev.Options{})
			if err == nil {
				return nil
			}
			h.kv.Close()
			h.kv = nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("reopen: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestVolumeMemberFailures runs a write-and-Sync loop on a volume while
// the leader is stopped and later restarted, then while a follower is
// stopped for good: every write Sync acknowledged is there afterwards and
// a full read and scrub find nothing.
func TestVolumeMemberFailures(t *testing.T) {
	if testing.Short() {
		t.Skip("short: a 3-member cluster with member failures")
	}
	c := startCluster(t, 3, 0)
	h := newVolume(t, c.URL(newPrefix(t)), testOptions())
	l := newLedger()
	var mu sync.Mutex // guards gen and failures for the loop and the checks
	gen, failures := uint32(0), 0
	loop := func(d time.Duration) {
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			mu.Lock()
			gen++
			g := gen
			mu.Unlock()
			if err := writeGen(h.v, l, g); err != nil {
				mu.Lock()
				failures++
				mu.Unlock()
				t.Logf("gen %d: %v (reopening)", g, err)
				if err := h.reopen(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	loop(time.Second)
	// The leader stops in the middle of the loop.
	done := make(chan struct{})
	go func() { defer close(done); loop(4 * time.Second) }()
	time.Sleep(time.Second)
	leader := c.Leader()
	t.Logf("stopping leader %s", leader.Name)
	leader.Stop(true)
	time.Sleep(1500 * time.Millisecond)
	c.Restart(leader)
	t.Logf("restarted %s", leader.Name)
	<-done
	mu.Lock()
	before := l.syncs
	mu.Unlock()
	checkVolume(t, h.v, l)
	// A follower dies for good; the two left are a quorum.
	var follower *member
	lead := c.Leader()
	for _, m := range c.Members {
		if m != lead {
			follower = m
		}
	}
	done = make(chan struct{})
	go func() { defer close(done); loop(3 * time.Second) }()
	time.Sleep(time.Second)
	t.Logf("killing follower %s", follower.Name)
	follower.Stop(true)
	os.RemoveAll(follower.Dir)
	<-done
	if l.syncs <= before {
		t.Fatalf("no Sync succeeded after the follower died (%d syncs before)", before)
	}
	if err := h.reopen(); err != nil {
		t.Fatal(err)
	}
	checkVolume(t, h.v, l)
	t.Logf("%d generations, %d syncs acknowledged, %d failed and reopened", gen, l.syncs, failures)
}

// proxy forwards loopback TCP connections to target until closed: closing
// it cuts every connection, a partition between a client and a member.
type proxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

func newProxy(t testing.TB, target string) *proxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, target: target}
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.l.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			u.Close()
			return
		}
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		go func() { io.Copy(u, c); u.Close() }()
		go func() { io.Copy(c, u); c.Close() }()
	}
}

func (p *proxy) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	p.l.Close()
	for _, c := range p.conns {
		c.Close()
	}
}

// TestVolumePartition cuts a writer off the cluster (every connection
// through loopback proxies closed): its writes fail with ErrUnavailable
// within the request timeout, nothing after the cut is acknowledged, and
// everything acknowledged before it is in the cluster.
func TestVolumePartition(t *testing.T) {
	if testing.Short() {
		t.Skip("short: waits for lease expiry")
	}
	n := members()
	c := startCluster(t, n, 0)
	var proxies []*proxy
	var hosts []string
	for _, m := range c.Members {
		p := newProxy(t, m.Client.Host)
		proxies = append(proxies, p)
		hosts = append(hosts, p.addr())
	}
	prefix := newPrefix(t)
	o := testOptions()
	o.OpTimeout = 2 * time.Second
	h := newVolume(t, "etcd://"+strings.Join(hosts, ",")+"/"+prefix, o)
	l := newLedger()
	for g := uint32(1); g <= 20; g++ {
		if err := writeGen(h.v, l, g); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range proxies {
		p.close()
	}
	start := time.Now()
	err := writeGen(h.v, l, 21)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "cluster unavailable") {
		t.Fatalf("write and Sync through a partition = %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 4*o.OpTimeout {
		t.Errorf("the failure took %v (request timeout %v)", d, o.OpTimeout)
	}
	if l.syncs != 20 {
		t.Fatalf("%d syncs acknowledged, want the 20 before the partition", l.syncs)
	}
	t.Logf("partitioned write failed after %v: %v", time.Since(start), err)
	// Another host, on the cluster directly, after the cut-off writer's
	// lease expired: everything acknowledged is there.
	h.v.Close()
	h.v = nil
	h.kv.abandon()
	h.kv = nil
	h.url = c.URL(prefix)
	if err := h.reopen(); err != nil {
		t.Fatal(err)
	}
	checkVolume(t, h.v, l)
}

// TestMain runs the failover child when asked to (see TestVolumeFailover).
func TestMain(m *testing.M) {
	if url := os.Getenv("DIFCTL_ETCD_CHILD_URL"); url != "" {
		os.Exit(failoverChild(url, os.Getenv("DIFCTL_ETCD_CHILD_IMG")))
	}
	os.Exit(m.Run())
}

// failoverChild is the writer process of TestVolumeFailover: it protects
// the image, then writes generations forever, printing "try GEN" before
// each and "ack GEN" after its Sync returned.
func failoverChild(url, img string) int {
	o := testOptions()
	o.Holder = "host=child"
	s, err := Open(url, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dev, err := device.OpenFile(img, device.FileOptions{BlockSize: wlBlockSize})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	v, err := blockdev.Create(context.Background(), dev, s, blockdev.CreateOptions{Format: dif.MustFormat("4096+8")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	l := newLedger()
	w := bufio.NewWriter(os.Stdout)
	for g := uint32(1); ; g++ {
		fmt.Fprintf(w, "try %d\n", g)
		w.Flush()
		if err := writeGen(v, l, g); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Fprintf(w, "ack %d\n", g)
		w.Flush()
	}
}

// TestVolumeFailover SIGKILLs a writer process (this test binary run
// again) in the middle of its workload; a second opener waits for the dead
// writer's lease to expire, opens the volume, recovers it, and finds every
// acknowledged write and no failure.
func TestVolumeFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("short: a child process on a 3-member cluster")
	}
	c := startCluster(t, 3, 0)
	url := c.URL(newPrefix(t))
	img := filepath.Join(t.TempDir(), "disk.img")
	f, err := device.CreateImage(img, wlBlocks*wlBlockSize, device.FileOptions{BlockSize: wlBlockSize})
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DIFCTL_ETCD_CHILD_URL="+url, "DIFCTL_ETCD_CHILD_IMG="+img)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Replay the child's log into a ledger; kill it after 40 acks.
	l := newLedger()
	sc := bufio.NewScanner(out)
	acks := 0
	for sc.Scan() {
		word, num, _ := strings.Cut(sc.Text(), " ")
		g, _ := strconv.Atoi(num)
		switch word {
		case "try":
			for _, run := range plan(uint32(g)) {
				l.try(run[0], int(run[1]), uint32(g))
			}
		case "ack":
			l.ack()
			acks++
		}
		if acks == 40 {
			cmd.Process.Signal(syscall.SIGKILL)
			break
		}
	}
	go io.Copy(io.Discard, out)
	cmd.Wait()
	killed := time.Now()
	if acks < 40 {
		t.Fatalf("the child stopped after %d acknowledged syncs", acks)
	}
	o := testOptions()
	_, err = Open(url, o)
	var le *LockedError
	if !errors.As(err, &le) || !strings.Contains(le.Holder, "host=child") {
		t.Fatalf("Open right after the kill = %v, want a *LockedError naming the dead child", err)
	}
	o.LockWait = 10 * time.Second
	s, err := Open(url, o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t.Logf("opened %v after the SIGKILL (lease TTL %v)", time.Since(killed), o.LeaseTTL)
	dev, err := device.OpenFile(img, device.FileOptions{BlockSize: wlBlockSize})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	v, err := blockdev.Open(context.Background(), dev, s, blockdev.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	t.Logf("recovery: %+v", v.Stats().Recovery)
	checkVolume(t, v, l)
}
