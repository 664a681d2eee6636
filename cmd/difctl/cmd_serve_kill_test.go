package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/difctl/difctl/internal/nbdtest"
)

// killBlock is the block size of the image of TestServeMirrorSIGKILL.
const killBlock = 4096

// killData is version v of block b: version 0 is what the image held when
// it was protected, every later version the data of one client write.
func killData(v uint64, b int64) []byte {
	p := make([]byte, killBlock)
	x := v*0x9e3779b97f4a7c15 ^ uint64(b)*0xbf58476d1ce4e5b9
	for i := 0; i < len(p); i += 8 {
		x += 0x9e3779b97f4a7c15
		z := (x ^ x>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		binary.LittleEndian.PutUint64(p[i:], z^z>>31)
	}
	return p
}

// killModel is what each block of the image may hold.
type killModel struct {
	mu sync.Mutex
	// cur is the version a block must hold: the last one a flush
	// acknowledged, or one read since.
	cur []uint64
	// maybe are the versions written since, not acknowledged by a flush:
	// a crash may keep any of them.
	maybe [][]uint64
	// round are the versions a read during the round may return: cur at
	// its start, maybe, and every version written since.
	round [][]uint64
}

func newKillModel(blocks int64) *killModel {
	m := &killModel{cur: make([]uint64, blocks), maybe: make([][]uint64, blocks), round: make([][]uint64, blocks)}
	m.startRound()
	return m
}

func (m *killModel) startRound() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for b := range m.cur {
		m.round[b] = append(append(m.round[b][:0], m.cur[b]), m.maybe[b]...)
	}
}

// written records version v of blocks [b, b+n) as sent (before the write
// is: it may land even if no reply comes).
func (m *killModel) written(v uint64, b, n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := b; i < b+n; i++ {
		m.maybe[i] = append(m.maybe[i], v)
		m.round[i] = append(m.round[i], v)
	}
}

// flushed records the writes ws, all of which completed before a flush
// that succeeded: they are durable.
func (m *killModel) flushed(ws [][3]int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range ws {
		for i := w[1]; i < w[1]+w[2]; i++ {
			m.cur[i] = uint64(w[0])
			m.maybe[i] = m.maybe[i][:0]
		}
	}
}

// allowed reports whether p is one of the versions of block b in vs.
func allowed(p []byte, b int64, vs []uint64) (uint64, bool) {
	for _, v := range vs {
		if bytes.Equal(p, killData(v, b)) {
			return v, true
		}
	}
	return 0, false
}

// serveProcess is difctl serve running as a process.
type serveProcess struct {
	cmd    *exec.Cmd
	exited chan struct{}
	stderr *syncBuffer
}

// startServeProcess runs difctl serve on img and sock as a process and
// waits until it takes connections. It is killed when the test ends.
func startServeProcess(t *testing.T, img, sock string) *serveProcess {
	t.Helper()
	s := &serveProcess{cmd: exec.Command("difctl", "serve", "--socket", sock, img), exited: make(chan struct{}), stderr: &syncBuffer{}}
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(s.kill)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return s
		}
		select {
		case <-s.exited:
			t.Fatalf("difctl serve exited before serving: %s", s.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("difctl serve made no socket in 30 s: %s", s.stderr.String())
		}
	}
}

// kill sends SIGKILL and waits until the process is gone.
func (s *serveProcess) kill() {
	s.cmd.Process.Kill()
	<-s.exited
}

// repairedRE matches the line of serve's log for a block a read repaired
// from leg 1.
var repairedRE = regexp.MustCompile(`(?m)^difctl: .*: block (\d+) \(.*\) repaired from leg 1 \(`)

// TestServeMirrorSIGKILL kills difctl serve with SIGKILL, at seeded random
// moments, while it serves a mirrored image whose leg 0 rots. Each round,
// 5% of leg 0's blocks are overwritten with garbage behind the idle
// server; then one client reads the whole image (a bad block read from
// leg 0 is repaired from leg 1) while another writes and flushes, and the
// server is killed at a random point of the reader's first pass. After
// each restart the blocks the kill left in doubt rot on leg 0 too, and
// then every block must read (0 false positives: leg 1 holds a verifying
// copy of each) and hold the version the last acknowledging flush left or
// one written after it (0 lost synced writes; never garbage or an older
// version: 0 laundered blocks), and every block the reads repaired must be
// the same on both legs. A read during a round returns only versions of
// its block. At the end, after difctl resync, scrub --repair and scrub
// --errors-only (which settles the findings a kill left open between a
// repair's write and its record), both legs are byte for byte what the
// image read (no leg left silently different), and inspect lists repairs
// of leg 0 from leg 1 and no finding open.
func TestServeMirrorSIGKILL(t *testing.T) {
	size, rounds := int64(32<<20), 30
	if testing.Short() {
		size, rounds = 8<<20, 10
	}
	blocks := size / killBlock
	dir := t.TempDir()
	img, leg := filepath.Join(dir, "disk.img"), filepath.Join(dir, "leg1.img")
	data := make([]byte, size)
	for b := range blocks {
		copy(data[b*killBlock:], killData(0, b))
	}
	if err := os.WriteFile(img, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("difctl", "protect", "--format", "4096+8", "--mirror", leg, img).CombinedOutput(); err != nil {
		t.Fatalf("protect --mirror: %v\n%s", err, out)
	}
	f0, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f0.Close()
	sock := filepath.Join(dir, "disk.sock")
	model := newKillModel(blocks)
	rng := rand.New(rand.NewPCG(40, 2))
	var version uint64
	repairs := 0

	// check reads every block through a new connection: each must read
	// and hold cur or a version of maybe, which becomes cur.
	check := func(when string) {
		t.Helper()
		c, err := nbdtest.Dial("unix", sock, "disk.img")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		const chunk = 16
		for b := int64(0); b < blocks; b += chunk {
			p, err := c.Read(uint64(b*killBlock), chunk*killBlock)
			if err != nil {
				t.Fatalf("%s: blocks %d-%d do not read: %v (a false positive: leg 1 holds a verifying copy)", when, b, b+chunk-1, err)
			}
			for i := range int64(chunk) {
				blk := p[i*killBlock : (i+1)*killBlock]
				v, ok := allowed(blk, b+i, append([]uint64{model.cur[b+i]}, model.maybe[b+i]...))
				if !ok {
					what := "garbage (laundered)"
					if old, ok := allowed(blk, b+i, model.round[b+i]); ok {
						what = fmt.Sprintf("version %d, older than the acknowledged %d (a lost synced write)", old, model.cur[b+i])
					}
					t.Fatalf("%s: block %d holds %s; want version %d or one of %v", when, b+i, what, model.cur[b+i], model.maybe[b+i])
				}
				model.cur[b+i], model.maybe[b+i] = v, model.maybe[b+i][:0]
			}
		}
	}

	// rot overwrites block b of leg 0 with garbage.
	rot := func(b int64) {
		t.Helper()
		g := make([]byte, killBlock)
		for i := range g {
			g[i] = byte(rng.Uint32())
		}
		if _, err := f0.WriteAt(g, b*killBlock); err != nil {
			t.Fatal(err)
		}
	}

	srv := startServeProcess(t, img, sock)
	for round := range rounds {
		// Leg 0 rots behind the idle server: 5% of its blocks.
		for range blocks / 20 {
			rot(rng.Int64N(blocks))
		}
		model.startRound()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var bad []string
		fail := func(format string, args ...any) {
			mu.Lock()
			bad = append(bad, fmt.Sprintf(format, args...))
			mu.Unlock()
		}
		rd, err := nbdtest.Dial("unix", sock, "disk.img")
		if err != nil {
			t.Fatal(err)
		}
		wr, err := nbdtest.Dial("unix", sock, "disk.img")
		if err != nil {
			t.Fatal(err)
		}
		// The kill comes at a random moment of the reader's first pass,
		// while it meets bad blocks: once it has read killAt chunks, and
		// up to 2 ms more.
		const chunk = 16
		start, killAt := rng.Int64N(blocks/chunk)*chunk, rng.Int64N(blocks/chunk)
		reached := make(chan struct{})
		var once sync.Once
		wg.Go(func() {
			// The reader: the whole image, from a random block on, and on.
			defer rd.Close()
			defer once.Do(func() { close(reached) })
			for k, b := int64(0), start; ; k, b = k+1, (b+chunk)%blocks {
				if k == killAt {
					once.Do(func() { close(reached) })
				}
				p, err := rd.Read(uint64(b*killBlock), chunk*killBlock)
				var re *nbdtest.ReplyError
				if errors.As(err, &re) {
					fail("read of blocks %d-%d failed: %v (a false positive)", b, b+chunk-1, err)
					return
				}
				if err != nil {
					return // the server is gone
				}
				model.mu.Lock()
				for i := range int64(chunk) {
					if _, ok := allowed(p[i*killBlock:(i+1)*killBlock], b+i, model.round[b+i]); !ok {
						fail("a read returned block %d holding none of its versions %v (laundered)", b+i, model.round[b+i])
					}
				}
				model.mu.Unlock()
			}
		})
		wseed := rng.Uint64()
		wg.Go(func() {
			// The writer: runs of 1 to 8 blocks, a flush after 1 to 4.
			defer wr.Close()
			r := rand.New(rand.NewPCG(wseed, 3))
			var pending [][3]int64
			for {
				n := 1 + r.Int64N(8)
				b := r.Int64N(blocks - n + 1)
				mu.Lock()
				version++
				v := version
				mu.Unlock()
				p := make([]byte, 0, n*killBlock)
				for i := range n {
					p = append(p, killData(v, b+i)...)
				}
				model.written(v, b, n)
				if err := wr.Write(uint64(b*killBlock), p); err != nil {
					return
				}
				pending = append(pending, [3]int64{int64(v), b, n})
				if r.IntN(3) == 0 {
					if err := wr.Flush(); err != nil {
						return
					}
					model.flushed(pending)
					pending = pending[:0]
				}
			}
		})
		select {
		case <-reached:
			time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
		case <-time.After(30 * time.Second):
			t.Error("the reader did not get far in 30 s")
		}
		srv.kill()
		wg.Wait()
		for _, s := range bad {
			t.Errorf("round %d: %s", round, s)
		}
		if t.Failed() {
			t.FailNow()
		}
		killed := srv.stderr.String()
		n := len(repairedRE.FindAllString(killed, -1))
		repairs += n
		t.Logf("round %d: killed after %d writes in all; this server repaired %d blocks on reads", round, version, n)
		srv = startServeProcess(t, img, sock)
		// The blocks the kill left in doubt (written, not acknowledged)
		// rot on leg 0 once recovery has decided them: it must have
		// written the copy it took to leg 1 too.
		doubt := 0
		for b := range blocks {
			if len(model.maybe[b]) > 0 {
				rot(b)
				doubt++
			}
		}
		check(fmt.Sprintf("round %d, after the restart (%d blocks in doubt rotted on leg 0)", round, doubt))
		// The blocks the reads repaired are repaired on the medium: leg 0
		// holds leg 1's copy (the restart's recovery, and the check's
		// repairs, made the legs agree on every other block written).
		b0, err := os.ReadFile(img)
		if err != nil {
			t.Fatal(err)
		}
		b1, err := os.ReadFile(leg)
		if err != nil {
			t.Fatal(err)
		}
		for _, log := range []string{killed, srv.stderr.String()} {
			for _, m := range repairedRE.FindAllStringSubmatch(log, -1) {
				b, _ := strconv.ParseInt(m[1], 10, 64)
				if !bytes.Equal(b0[b*killBlock:(b+1)*killBlock], b1[b*killBlock:(b+1)*killBlock]) {
					t.Fatalf("round %d: block %d, logged repaired, differs between the legs", round, b)
				}
			}
		}
	}
	srv.kill()
	if repairs == 0 {
		t.Error("no block was repaired while the server ran")
	}

	// No leg left silently different: after resync and scrub --repair,
	// both legs are the model, which is what the image read.
	if out, err := exec.Command("difctl", "resync", img).CombinedOutput(); err != nil {
		t.Fatalf("resync: %v\n%s", err, out)
	}
	out, err := exec.Command("difctl", "scrub", "--repair", img).CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == exitCorrected) {
		t.Fatalf("scrub --repair: %v (want exit 0 or %d)\n%s", err, exitCorrected, out)
	}
	for line := range strings.Lines(string(out)) {
		if strings.Contains(line, " blocks checked ") {
			t.Logf("scrub --repair: %s", strings.TrimSpace(line))
		}
	}
	// A kill between a repair's write and its record leaves the finding
	// open (the intent) on a block that passes: a recheck of the open
	// findings settles them.
	if out, err := exec.Command("difctl", "scrub", "--errors-only", img).CombinedOutput(); err != nil {
		t.Fatalf("scrub --errors-only: %v\n%s", err, out)
	} else {
		t.Logf("scrub --errors-only: %s", bytes.TrimSpace(out))
	}
	for b := range blocks {
		copy(data[b*killBlock:], killData(model.cur[b], b))
	}
	for _, p := range []string{img, leg} {
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			for b := range blocks {
				if !bytes.Equal(got[b*killBlock:(b+1)*killBlock], data[b*killBlock:(b+1)*killBlock]) {
					t.Fatalf("%s: block %d differs from what the image read (version %d)", p, b, model.cur[b])
				}
			}
		}
	}
	if out, err := exec.Command("difctl", "verify", img).CombinedOutput(); err != nil {
		t.Errorf("verify: %v\n%s", err, out)
	}
	js, err := exec.Command("difctl", "--json", "inspect", img).Output()
	if err != nil {
		t.Fatalf("inspect --json: %v", err)
	}
	var rec manifestRecord
	if err := json.Unmarshal(bytes.SplitN(js, []byte("\n"), 2)[0], &rec); err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, js)
	}
	if rec.Findings["open"] != 0 || rec.Findings["unrepairable"] != 0 || rec.Findings["repaired"] == 0 || len(rec.Repairs) == 0 {
		t.Errorf("inspect: findings %v, %d repairs listed; want repairs and none open or unrepairable", rec.Findings, len(rec.Repairs))
	}
	for _, r := range rec.Repairs {
		if r.Leg != 0 || !strings.HasPrefix(r.Source, "leg 1 (") {
			t.Errorf("inspect: repair %+v, want leg 0 repaired from leg 1", r)
		}
	}
	for _, l := range rec.Legs {
		if l.StaleBlocks != 0 {
			t.Errorf("inspect: leg %+v stale", l)
		}
	}
}
