package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/crc64"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
)

// Oracles independent of the kernels: the standard library for CRC-32C and
// CRC-64/NVME, a bitwise loop for CRC-16/T10-DIF.
var crcOracles = map[string]func(p []byte) uint64{
	"t10dif": func(p []byte) uint64 {
		var crc uint16
		for _, b := range p {
			crc ^= uint16(b) << 8
			for range 8 {
				if crc&0x8000 != 0 {
					crc = crc<<1 ^ 0x8BB7
				} else {
					crc <<= 1
				}
			}
		}
		return uint64(crc)
	},
	"crc32c": func(p []byte) uint64 {
		return uint64(crc32.Checksum(p, crc32.MakeTable(crc32.Castagnoli)))
	},
	"crc64nvme": func(p []byte) uint64 {
		return crc64.Checksum(p, crc64.MakeTable(0x9A6C9329AC4BC9B5))
	},
}

func TestCrcOracles(t *testing.T) {
	// The catalogue's check values pin the oracles themselves.
	want := map[string]uint64{"t10dif": 0xD0DB, "crc32c": 0xE3069283, "crc64nvme": 0xAE8B14860A799888}
	for name, f := range crcOracles {
		if got := f([]byte("123456789")); got != want[name] {
			t.Errorf("oracle %s: check %#x, want %#x", name, got, want[name])
		}
	}
}

// TestRunCrcStreaming checks files and stdin of sizes around the read
// buffer, read in odd pieces, against the oracles.
func TestRunCrcStreaming(t *testing.T) {
	sizes := []int{0, 1, 15, crcBufSize - 1, crcBufSize, crcBufSize + 1, 3*crcBufSize + 17}
	if testing.Short() {
		sizes = []int{0, 1, crcBufSize + 1}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	dir := t.TempDir()
	for _, alg := range algorithms {
		for _, size := range sizes {
			data := make([]byte, size)
			for i := range data {
				data[i] = byte(rng.Uint32())
			}
			want := crcOracles[alg.name](data)
			wantLine := func(name string) string {
				return strings.TrimSuffix(fmt.Sprintf("%0*x %d %s", alg.bits/4, want, size, name), " ")
			}
			t.Run(fmt.Sprintf("alg=%s/size=%d/input=file", alg.name, size), func(t *testing.T) {
				path := filepath.Join(dir, fmt.Sprintf("%s-%d", alg.name, size))
				if err := os.WriteFile(path, data, 0o666); err != nil {
					t.Fatal(err)
				}
				var stdout, stderr bytes.Buffer
				err := runCrc(context.Background(), crcOptions{Alg: alg, Files: []string{path}}, &stdout, &stderr)
				if err != nil {
					t.Fatal(err)
				}
				if got := strings.TrimSuffix(stdout.String(), "\n"); got != wantLine(path) {
					t.Errorf("got %q, want %q", got, wantLine(path))
				}
				if stderr.Len() != 0 {
					t.Errorf("stderr %q", stderr.String())
				}
			})
			t.Run(fmt.Sprintf("alg=%s/size=%d/input=stdin", alg.name, size), func(t *testing.T) {
				var stdout bytes.Buffer
				in := iotest.HalfReader(iotest.DataErrReader(bytes.NewReader(data)))
				err := runCrc(context.Background(), crcOptions{Alg: alg, Stdin: in}, &stdout, io.Discard)
				if err != nil {
					t.Fatal(err)
				}
				if got := strings.TrimSuffix(stdout.String(), "\n"); got != wantLine("") {
					t.Errorf("got %q, want %q", got, wantLine(""))
				}
			})
		}
	}
}

func TestRunCrcJSON(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte("123456789"), 0o666); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	var stdout, stderr bytes.Buffer
	opts := crcOptions{globalOptions: globalOptions{JSON: true}, Alg: algorithms[2], Files: []string{good, missing, "-"}, Stdin: strings.NewReader("123456789")}
	err := runCrc(context.Background(), opts, &stdout, &stderr)
	if got := classify(err, true); got != exitOperational {
		t.Fatalf("exit code %d (%v), want %d", got, err, exitOperational)
	}
	type line struct {
		Schema, Type, Alg, CRC, File, Error string
		Bytes                               int64
	}
	want := []line{
		{Schema: schemaVersion, Type: "crc", Alg: "crc64nvme", CRC: "ae8b14860a799888", File: good, Bytes: 9},
		{Schema: schemaVersion, Type: "error", File: missing, Error: "open " + missing + ": no such file or directory"},
		{Schema: schemaVersion, Type: "crc", Alg: "crc64nvme", CRC: "ae8b14860a799888", File: "-", Bytes: 9},
	}
	dec := json.NewDecoder(&stdout)
	dec.DisallowUnknownFields()
	for i, w := range want {
		var got line
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if got != w {
			t.Errorf("line %d: %+v, want %+v", i, got, w)
		}
	}
	if dec.More() {
		t.Error("extra output")
	}
	if got, want := stderr.String(), "difctl: open "+missing+": no such file or directory\n"; got != want {
		t.Errorf("stderr %q, want %q", got, want)
	}
}

func TestRunCrcReadError(t *testing.T) {
	var stdout, stderr bytes.Buffer
	in := iotest.TimeoutReader(strings.NewReader(strings.Repeat("x", 100)))
	err := runCrc(context.Background(), crcOptions{Alg: algorithms[0], Stdin: iotest.OneByteReader(in)}, &stdout, &stderr)
	if got := classify(err, true); got != exitOperational {
		t.Errorf("exit code %d, want %d", got, exitOperational)
	}
	if stdout.Len() != 0 {
		t.Errorf("a failed input printed %q", stdout.String())
	}
	if got, want := stderr.String(), "difctl: "+iotest.ErrTimeout.Error()+"\n"; got != want {
		t.Errorf("stderr %q, want %q", got, want)
	}
}

// TestRunCrcCancelled: an interrupt stops crc at once with the cause, and
// the inputs after it are not read.
func TestRunCrcCancelled(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := &signalError{sig: os.Interrupt}
	cancel(cause)
	var stdout, stderr bytes.Buffer
	err := runCrc(ctx, crcOptions{Alg: algorithms[0], Files: []string{"-", "/nonexistent"}, Stdin: strings.NewReader("abc")}, &stdout, &stderr)
	if !errors.Is(err, errInterrupted) {
		t.Errorf("err = %v, want the interrupt", err)
	}
	if stdout.Len()+stderr.Len() != 0 {
		t.Errorf("output after the interrupt: stdout %q, stderr %q", stdout.String(), stderr.String())
	}
}

func TestRunCrcNoStdin(t *testing.T) {
	var stdout bytes.Buffer
	if err := runCrc(context.Background(), crcOptions{Alg: algorithms[1]}, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	if got, want := stdout.String(), "00000000 0\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestInputSize: the progress total is the size of a regular file, and
// unknown (-1) for a pipe or a character device.
func TestInputSize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, make([]byte, 12345), 0o666); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := inputSize(f); got != 12345 {
		t.Errorf("regular file: %d, want 12345", got)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if got := inputSize(r); got != -1 {
		t.Errorf("pipe: %d, want -1", got)
	}
	if null, err := os.Open(os.DevNull); err == nil {
		defer null.Close()
		if got := inputSize(null); got != -1 {
			t.Errorf("%s: %d, want -1", os.DevNull, got)
		}
	}
}
