package blockdev_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/difctl/difctl/blockdev"
	"github.com/difctl/difctl/blockdev/device"
	"github.com/difctl/difctl/dif"
	"github.com/difctl/difctl/store"
)

// Protect an image with a Pebble store, write, sync, read back, and see a
// corrupted block reported.
func Example_volume() {
	dir, _ := os.MkdirTemp("", "difctl-example")
	defer os.RemoveAll(dir)
	img, _ := device.CreateImage(filepath.Join(dir, "disk.img"), 1<<20, device.FileOptions{BlockSize: 4096})
	defer img.Close()
	kv, _ := store.Open("pebble:" + filepath.Join(dir, "store"))
	defer kv.Close()

	v, err := blockdev.Create(context.Background(), img, kv, blockdev.CreateOptions{Format: dif.MustFormat("4096+8")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer v.Close()
	v.WriteAt([]byte("hello, protected world"), 8192)
	v.Sync()
	buf := make([]byte, 22)
	v.ReadAt(buf, 8192)
	fmt.Printf("%s\n", buf)

	img.WriteAt([]byte("H"), 8192) // bit rot behind the volume's back
	_, err = v.ReadAt(buf, 8192)
	var ie *blockdev.IntegrityError
	fmt.Println(errors.Is(err, dif.ErrIntegrity), errors.As(err, &ie) && ie.LBA == 2)
	// Output:
	// hello, protected world
	// true true
}
