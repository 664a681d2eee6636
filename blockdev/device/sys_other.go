//go:build !linux

package device

import (
	"errors"
	"io/fs"
	"os"
)

const oDirect = 0

func blockGeometry(*os.File) (int64, int, int, error) { return 0, 0, 0, errors.ErrUnsupported }

func dioAlign(*os.File) (int, int, bool) { return 0, 0, false }

func fdatasync(f *os.File) error { return f.Sync() }

func fadviseDontNeed(*os.File, int64, int64) error { return errors.ErrUnsupported }

func startWriteback(*os.File, int64, int64) error { return errors.ErrUnsupported }

func punchHole(*os.File, int64, int64) error { return errors.ErrUnsupported }

func blkZeroOut(*os.File, int64, int64) error { return errors.ErrUnsupported }

func seekData(*os.File, int64) (Extent, error) { return Extent{}, errors.ErrUnsupported }

func clearDirect(*os.File) error { return nil }

func preferredIOSize(fs.FileInfo) int { return 0 }

func mmapRead(*os.File, int64) ([]byte, error) { return nil, errors.ErrUnsupported }

func munmap([]byte) error { return nil }

func madviseDontNeed([]byte) error { return nil }
