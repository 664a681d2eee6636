package main

import (
	"bufio"
	"os"
	"runtime"
	"strings"

	"github.com/difctl/difctl/kernels"
)

// cpuRecord describes the machine; `kernels` and `bench` start with it.
type cpuRecord struct {
	header
	GOOS     string   `json:"goos"`
	GOARCH   string   `json:"goarch"`
	Model    string   `json:"model,omitempty"` // from /proc/cpuinfo; empty when unknown
	Features []string `json:"features"`        // the features the kernels use that the CPU has
}

func (*cpuRecord) recordType() string { return "cpu" }

func newCPURecord() *cpuRecord {
	f := kernels.CPUFeatures()
	if f == nil {
		f = []string{}
	}
	return &cpuRecord{GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, Model: cpuModel(), Features: f}
}

// cpuModel returns the CPU model name on Linux, best effort, as `go test`
// prints it above benchmark results.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "model name", "Model", "cpu model":
			return strings.TrimSpace(v)
		}
	}
	return ""
}
