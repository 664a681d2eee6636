package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/difctl/difctl/kernels"
)

var fakeImpls = []kernels.Impl{
	{Package: "crct10dif", Name: "vpclmul", Available: false},
	{Package: "crct10dif", Name: "pclmul", Available: true, Active: true},
	{Package: "crct10dif", Name: "generic", Available: true},
	{Package: "crc32c", Name: "generic", Available: true, Active: true},
}

func TestRunKernelsText(t *testing.T) {
	var stdout bytes.Buffer
	opts := kernelsOptions{List: func() []kernels.Impl { return fakeImpls }}
	if err := runKernels(context.Background(), opts, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(stdout.String(), "\n\n")
	if !ok {
		t.Fatalf("no blank line before the table:\n%s", stdout.String())
	}
	want := `KERNEL     IMPL     STATUS
crct10dif  vpclmul  unsupported
crct10dif  pclmul   active
crct10dif  generic  available
crc32c     generic  active
`
	if table != want {
		t.Errorf("table:\n%s\nwant:\n%s", table, want)
	}
	if !regexp.MustCompile(`(?m)^arch: +\w+/\w+\nfeatures: .+\n`).MatchString(stdout.String()) {
		t.Errorf("no arch and features lines:\n%s", stdout.String())
	}
}

func TestRunKernelsJSON(t *testing.T) {
	var stdout bytes.Buffer
	opts := kernelsOptions{globalOptions: globalOptions{JSON: true}, List: func() []kernels.Impl { return fakeImpls }}
	if err := runKernels(context.Background(), opts, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(&stdout)
	dec.DisallowUnknownFields()
	var cpu cpuRecord
	if err := dec.Decode(&cpu); err != nil || cpu.Type != "cpu" || cpu.Schema != schemaVersion || cpu.Features == nil {
		t.Fatalf("first record %+v, %v: want the cpu record with a features array", cpu, err)
	}
	for i, im := range fakeImpls {
		var r kernelRecord
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		want := kernelRecord{header: header{schemaVersion, "kernel"}, Kernel: im.Package, Impl: im.Name, Available: im.Available, Active: im.Active}
		if r != want {
			t.Errorf("record %d: %+v, want %+v", i, r, want)
		}
	}
	if dec.More() {
		t.Error("extra records")
	}
}

// TestRunKernelsReal checks the real registry: every kernel package is
// listed, each with a generic implementation and exactly one active one.
func TestRunKernelsReal(t *testing.T) {
	var stdout bytes.Buffer
	if err := runKernels(context.Background(), kernelsOptions{}, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, k := range kernels.Packages {
		if n := len(regexp.MustCompile(`(?m)^`+k+` +\S+ +active$`).FindAllString(stdout.String(), -1)); n != 1 {
			t.Errorf("%s: %d active implementations:\n%s", k, n, stdout.String())
		}
		if !regexp.MustCompile(`(?m)^` + k + ` +generic `).MatchString(stdout.String()) {
			t.Errorf("%s: no generic implementation listed", k)
		}
	}
}
