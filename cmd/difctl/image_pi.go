package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/difctl/difctl/blockdev/nvme"
	"github.com/difctl/difctl/blockdev/pisource"
	"github.com/difctl/difctl/dif"
)

// piImage is an image with its own PI, opened for a command: an extended-
// LBA image (meta == "") or a DIX pair.
type piImage struct {
	path, meta string
	f          dif.Format // in the image's layout
	p          dif.Params
	ext        *pisource.ExtendedImage
	dix        *pisource.DIXPair
	files      []*os.File
	dataFile   *os.File     // the image (the data file of a DIX pair)
	metaFile   *os.File     // the metadata file of a DIX pair
	dev        *nvme.Device // an NVMe namespace with PI (device_pi.go); none of the above
	src        *pisource.Source
}

// openMode says which files of an image a command writes.
type openMode uint8

const (
	openRead      openMode = 0
	openWriteData openMode = 1 << iota // the image, or the data file of a DIX pair
	openWriteMeta                      // the metadata: the image, or the metadata file
)

// openPIImage opens path (and meta, the metadata file of a DIX pair, or "")
// in format f, to be verified with p. Sizes that do not fit the format are
// operational errors with a one-line explanation.
func openPIImage(path, meta string, f dif.Format, p dif.Params, mode openMode) (*piImage, error) {
	im := &piImage{path: path, meta: meta, p: p}
	ok := false
	defer func() {
		if !ok {
			im.Close()
		}
	}()
	var err error
	if meta == "" {
		im.f = f.WithLayout(dif.Interleaved)
		var size int64
		im.dataFile, size, err = openSizedFile(path, mode != openRead)
		if err != nil {
			return nil, err
		}
		if size == 0 && mode == openRead {
			return nil, emptyImage(path)
		}
		im.files = append(im.files, im.dataFile)
		im.ext, err = pisource.NewExtendedImage(im.dataFile, size, f.BlockSize(), f.MetadataSize())
		if err != nil {
			return nil, im.sizeError(err)
		}
		im.src, err = pisource.NewExtendedSource(im.ext, im.f, p)
	} else {
		im.f = f.WithLayout(dif.Separate)
		var dsize, msize int64
		im.dataFile, dsize, err = openSizedFile(path, mode&openWriteData != 0)
		if err != nil {
			return nil, err
		}
		if dsize == 0 && mode == openRead {
			return nil, emptyImage(path)
		}
		im.files = append(im.files, im.dataFile)
		im.metaFile, msize, err = openSizedFile(meta, mode&openWriteMeta != 0)
		if err != nil {
			return nil, err
		}
		im.files = append(im.files, im.metaFile)
		im.dix, err = pisource.NewDIXPair(im.dataFile, dsize, im.metaFile, msize, f.BlockSize(), f.MetadataSize())
		if err != nil {
			return nil, im.sizeError(err)
		}
		im.src, err = pisource.NewDIXSource(im.dix, im.f, p)
	}
	if err != nil {
		return nil, err
	}
	ok = true
	return im, nil
}

// sizeError explains a *pisource.SizeError in terms of the files and the
// format the user gave.
func (im *piImage) sizeError(err error) error {
	var se *pisource.SizeError
	if !errors.As(err, &se) {
		return err
	}
	switch {
	case im.meta == "":
		return fmt.Errorf("%s: size %d is not a multiple of the %d-byte extended block of format %s (truncated, or not in this format)",
			im.path, se.Size, se.Unit, im.f)
	case se.Unit != 0:
		return fmt.Errorf("%s: size %d is not a multiple of the %d-byte block of format %s (truncated, or not in this format)",
			im.path, se.Size, se.Unit, im.f)
	}
	blocks := se.Want / int64(im.f.MetadataSize())
	return fmt.Errorf("%s: size %d, want %d: %d bytes of metadata for each of the %d blocks of %s (truncated, or not in this format)",
		im.meta, se.Size, se.Want, im.f.MetadataSize(), blocks, im.path)
}

// Close closes the files.
func (im *piImage) Close() error {
	var errs []error
	for _, f := range im.files {
		errs = append(errs, f.Close())
	}
	im.files = nil
	if im.dev != nil {
		errs = append(errs, im.dev.Close())
		im.dev = nil
	}
	return errors.Join(errs...)
}

// name is how messages name the image: its path, with the metadata file of
// a DIX pair.
func (im *piImage) name() string {
	if im.meta == "" {
		return im.path
	}
	return im.path + " + " + im.meta
}

func (im *piImage) blocks() int64 { return im.src.Blocks() }

// extBlockSize is the bytes per block on media: data and metadata.
func (im *piImage) extBlockSize() int { return im.f.ExtendedBlockSize() }

// runBuffers returns the buffers of a run of up to n blocks in the image's
// layout (md is nil for an interleaved image).
func (im *piImage) runBuffers(n int) (data, md []byte) {
	if im.f.Layout() == dif.Interleaved {
		return make([]byte, n*im.f.ExtendedBlockSize()), nil
	}
	return make([]byte, n*im.f.BlockSize()), make([]byte, n*im.f.MetadataSize())
}

// read reads n blocks at lba into data and md (from runBuffers) and returns
// them cut to the run.
func (im *piImage) read(lba int64, n int, data, md []byte) ([]byte, []byte, error) {
	if im.dev != nil {
		if im.f.Layout() == dif.Interleaved {
			data, md = data[:n*im.f.ExtendedBlockSize()], nil
		} else {
			data, md = data[:n*im.f.BlockSize()], md[:n*im.f.MetadataSize()]
		}
		return data, md, im.dev.ReadBlocks(lba, n, data, md)
	}
	if im.meta == "" {
		data = data[:n*im.f.ExtendedBlockSize()]
		return data, nil, im.ext.ReadSectors(lba, n, data)
	}
	data, md = data[:n*im.f.BlockSize()], md[:n*im.f.MetadataSize()]
	return data, md, im.dix.ReadBlocks(lba, n, data, md)
}

// write writes back a run read by read. Only the parts the image was opened
// for are written: with openWriteMeta alone, a DIX pair's data is left.
func (im *piImage) write(lba int64, data, md []byte) error {
	if im.meta == "" {
		_, err := im.dataFile.WriteAt(data, lba*int64(im.f.ExtendedBlockSize()))
		return err
	}
	if len(data) > 0 {
		if _, err := im.dataFile.WriteAt(data, lba*int64(im.f.BlockSize())); err != nil {
			return err
		}
	}
	if len(md) > 0 {
		if _, err := im.metaFile.WriteAt(md, lba*int64(im.f.MetadataSize())); err != nil {
			return err
		}
	}
	return nil
}

// sync makes the writes durable.
func (im *piImage) sync() error {
	for _, f := range im.files {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	return nil
}

// emptyImage is the error of every command that checks an image of zero
// bytes (exit 8): there is no block to check, which is not "clean".
func emptyImage(path string) error {
	return fmt.Errorf("%s is empty (0 bytes): it has no blocks to check", path)
}
