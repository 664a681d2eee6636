package main

import (
	"fmt"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
)

// repairSources are the copies given with --from: opened read-only, each
// a blockdev.RepairSource named by its argument.
type repairSources struct {
	srcs   []blockdev.RepairSource
	closes []func() error
}

// openRepairSources opens each --from argument: an image file or a block
// device (read-only; its size must be the volume's, which the volume
// checks).
func openRepairSources(specs []string) (*repairSources, error) {
	rs := &repairSources{}
	for _, spec := range specs {
		f, err := device.OpenFile(spec, device.FileOptions{ReadOnly: true})
		if err != nil {
			rs.close()
			return nil, fmt.Errorf("repair source %s: %w", spec, err)
		}
		rs.srcs = append(rs.srcs, repairFile{f, spec})
		rs.closes = append(rs.closes, f.Close)
	}
	return rs, nil
}

func (rs *repairSources) close() {
	for _, c := range rs.closes {
		c()
	}
}

// repairFile is a file or device as a repair source: its size is checked
// against the volume's.
type repairFile struct {
	*device.File
	name string
}

func (f repairFile) String() string { return f.name }
