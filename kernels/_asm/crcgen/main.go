// Command crcgen writes the Go layer that every CRC kernel package shares,
// from the CRC's parameters, so that one place defines it:
//
//   - zcrc.go: the exported API (Size, Params, the errors, Update, Checksum,
//     Blocks, BlocksCopy, Combine, New), the dispatch variables that the
//     registry sets to the active implementation, and the portable Blocks
//     and BlocksCopy around the package's updateGeneric;
//   - zcrc_test.go: the shared harness (kerneltest) run on that API, the
//     fold-table freshness check and the pure-Go fold model;
//   - zentry_amd64_test.go: the tests of the single-call entry's targets
//     (entryTarget, entryTargetY: kernels/_asm/small);
//   - zfold_consts.go: the fold and Barrett constants (consts.go has the
//     math);
//   - for crc32c, zhybrid_consts_amd64.go: the merge constants of the
//     kernels that run CRC32 streams beside folding (hybrid.go).
//
// go generate in each kernel package runs it:
//
//	go run -C ../_asm ./crcgen -crc crc32c -dir ../crc32c
//
// Each package keeps by hand only what is its own: the package doc, the
// portable table code (*_generic.go), and the per-architecture registration
// and kernels.
package main

import (
	"bytes"
	"flag"
	"path/filepath"
	"text/template"

	"github.com/difctl/difctl/kernels/_asm/internal/scaffold"
)

func main() {
	var crcFlag, dir string
	scaffold.Main("crcgen", func(fs *flag.FlagSet) {
		fs.StringVar(&crcFlag, "crc", "", "t10dif, crc32c or crc64nvme")
		fs.StringVar(&dir, "dir", "", "the kernel package's directory, relative to kernels/_asm")
	}, func(cmd []string) ([]scaffold.File, error) {
		c, err := scaffold.LookupCRC(crcFlag)
		if err != nil {
			return nil, err
		}
		if dir == "" {
			return nil, scaffold.Usage("crcgen -crc NAME -dir DIR")
		}
		return generate(c, dir, scaffold.Warning(cmd))
	})
}

// generate returns the files of c's package in dir.
func generate(c scaffold.CRC, dir, warning string) ([]scaffold.File, error) {
	var files []scaffold.File
	add := func(name string, src []byte, err error) error {
		if err == nil {
			files = append(files, scaffold.File{Path: filepath.Join(dir, name), Data: src})
		}
		return err
	}
	api, err := render(apiTemplate, c, warning)
	if err := add("zcrc.go", api, err); err != nil {
		return nil, err
	}
	tests, err := render(testTemplate, c, warning)
	if err := add("zcrc_test.go", tests, err); err != nil {
		return nil, err
	}
	consts, err := foldConsts(c, warning)
	if err := add("zfold_consts.go", consts, err); err != nil {
		return nil, err
	}
	entry, err := render(entryTestTemplate, c, warning)
	if err := add("zentry_amd64_test.go", entry, err); err != nil {
		return nil, err
	}
	if c.Flag == "crc32c" {
		h, err := hybridConsts(warning)
		if err := add("zhybrid_consts_amd64.go", h, err); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// api is what the templates know of a CRC.
type api struct {
	scaffold.CRC
	Warning string
	Bits    uint   // 16, 32, 64
	Word    string // uint16 ...
	Hash    string // the hash interface New returns
	Sum     string // the typed Sum method: Sum16 ...
	// HasY is the variable that says the CPU has the AVX2 tier's
	// implementation whose Update updateEntryY is (entryTargetY).
	HasY string
}

func render(t *template.Template, c scaffold.CRC, warning string) ([]byte, error) {
	a := api{CRC: c, Warning: warning, Bits: c.Params.Width, HasY: "hasFoldAVX2"}
	if c.Flag == "crc32c" {
		a.HasY = "hasHybrid256"
	}
	switch a.Bits {
	case 16:
		a.Word, a.Hash, a.Sum = "uint16", "hash.Hash", "Sum16"
	case 32:
		a.Word, a.Hash, a.Sum = "uint32", "hash.Hash32", "Sum32"
	default:
		a.Word, a.Hash, a.Sum = "uint64", "hash.Hash64", "Sum64"
	}
	var b bytes.Buffer
	if err := t.Execute(&b, a); err != nil {
		return nil, err
	}
	return scaffold.Go(b.Bytes())
}

var apiTemplate = template.Must(template.New("api").Parse(`{{.Warning}}

package {{.Pkg}}

import (
	"encoding/binary"
	"errors"
	"hash"

	"github.com/difctl/difctl/kernels/internal/crcmath"
	"github.com/difctl/difctl/kernels/internal/impl"
	"github.com/difctl/difctl/kernels/internal/layout"
)

// Size is the size of a {{.Params.Name}} checksum in bytes.
const Size = {{.Bits}} / 8

// Params are the CRC parameters, for tests and documentation.
var Params = crcmath.{{if eq .Flag "t10dif"}}T10DIF{{else if eq .Flag "crc32c"}}CRC32C{{else}}CRC64NVME{{end}}

// ErrLayout is returned by Blocks and BlocksCopy when a buffer does not hold
// the blocks described.
var ErrLayout = errors.New("{{.Pkg}}: buffer too short for the block layout")

// ErrOverlap is returned by BlocksCopy when the blocks' span of the
// destination overlaps that of the source.
var ErrOverlap = errors.New("{{.Pkg}}: copy destination overlaps the source")

// The dispatch variables, set by the registry to the active implementation.
// blocksCopy is the copying kernel of that implementation where there is
// one, else blocksCopyPortable (a copy, then the active Blocks over it).
var (
	update     func(crc {{.Word}}, p []byte) {{.Word}}                     = updateGeneric
	blocks     func(dst []{{.Word}}, p []byte, blockLen, stride int)    = blocksGeneric
	blocksCopy func(dst []{{.Word}}, q, p []byte, blockLen, stride int) = blocksCopyPortable
)

// pkgName is the package's name in the implementation registry.
const pkgName = "{{.Pkg}}"

func init() {
	registerArch()
	impl.Register(pkgName, "generic", true, func() {
		update, blocks, blocksCopy = updateGeneric, blocksGeneric, blocksCopyPortable
	})
}

// blocksGeneric is Blocks by the portable implementation, block by block;
// the layout was checked.
func blocksGeneric(dst []{{.Word}}, p []byte, blockLen, stride int) {
	for i := range dst {
		off := i * stride
		dst[i] = updateGeneric(0, p[off:off+blockLen])
	}
}

// blocksCopyPortable is BlocksCopy as a copy of the blocks followed by the
// active Blocks over q; the layout was checked.
func blocksCopyPortable(dst []{{.Word}}, q, p []byte, blockLen, stride int) {
	layout.Copy(q, p, len(dst), blockLen, stride)
	blocks(dst, q, blockLen, stride)
}

// Update returns the result of adding the bytes in p to crc.
func Update(crc {{.Word}}, p []byte) {{.Word}} { return updateEntry(crc, p) }

// Checksum returns the {{.Params.Name}} of p.
func Checksum(p []byte) {{.Word}} { return updateEntry(0, p) }

// Blocks computes the guard of len(dst) blocks of blockLen bytes each, the
// i-th starting at p[i*stride]: dst[i] = Checksum(p[i*stride:][:blockLen]).
// A stride larger than blockLen skips the bytes between blocks (the PI of an
// extended-LBA layout such as 512+8). It returns ErrLayout, and writes
// nothing, unless blockLen >= 0, stride >= blockLen (when there is more than
// one block) and len(p) >= (len(dst)-1)*stride + blockLen.
//
// Blocks interleaves several blocks in each pass of the fold kernels, so it
// is much faster than a loop of Checksum calls on small blocks.
func Blocks(dst []{{.Word}}, p []byte, blockLen, stride int) error {
	if !layout.Valid(len(dst), len(p), blockLen, stride) {
		return ErrLayout
	}
	if len(dst) == 0 {
		return nil
	}
	blocks(dst, p, blockLen, stride)
	return nil
}

// BlocksCopy is Blocks that also copies the blocks: block i, the bytes
// p[i*stride:][:blockLen], is copied to q at the same offset, and dst[i] is
// the CRC of the bytes written to q. The bytes of q between blocks (stride >
// blockLen) are not written.
//
// It is meant for a source that may change underneath, such as a read-only
// mapping of a file's page cache: the caller hands q to its user, and dst
// describes exactly what q holds, from one pass over p. The active
// implementation copies in the fold kernel itself where it has a copying
// kernel, else it copies the blocks and runs Blocks over q.
//
// q must be long enough for the layout, by the rule Blocks applies to p, and
// the span of the blocks in q, q[:(len(dst)-1)*stride+blockLen], must not
// overlap that of p. It returns ErrLayout or ErrOverlap, and writes nothing,
// otherwise.
func BlocksCopy(dst []{{.Word}}, q, p []byte, blockLen, stride int) error {
	if err := layout.CheckCopy(len(dst), q, p, blockLen, stride, ErrLayout, ErrOverlap); err != nil || len(dst) == 0 {
		return err
	}
	blocksCopy(dst, q, p, blockLen, stride)
	return nil
}

// Combine returns the CRC of A||B given crcA = CRC(A), crcB = CRC(B) and
// lenB = len(B).
func Combine(crcA, crcB {{.Word}}, lenB int) {{.Word}} {
	return {{.Word}}(crcmath.Combine(Params, uint64(crcA), uint64(crcB), int64(lenB)))
}

// New returns a {{.Hash}} computing {{.Params.Name}}. Its Sum appends the
// CRC big-endian, as the guard is stored in protection information.
func New() {{.Hash}} { return new(digest) }

type digest struct{ crc {{.Word}} }

func (d *digest) Size() int      { return Size }
func (d *digest) BlockSize() int { return 1 }
func (d *digest) Reset()         { d.crc = 0 }
func (d *digest) Write(p []byte) (int, error) {
	d.crc = update(d.crc, p)
	return len(p), nil
}
func (d *digest) Sum(in []byte) []byte { return binary.BigEndian.AppendUint{{.Bits}}(in, d.crc) }

// {{.Sum}} returns the current CRC.
func (d *digest) {{.Sum}}() {{.Word}} { return d.crc }
`))

var testTemplate = template.Must(template.New("test").Parse(`{{.Warning}}

package {{.Pkg}}

import (
	"hash"
	"testing"

	"github.com/difctl/difctl/kernels/internal/kerneltest"
)

var kernel = kerneltest.Kernel[{{.Word}}]{
	Pkg:        pkgName,
	Params:     Params,
	Update:     Update,
	Checksum:   Checksum,
	Blocks:     Blocks,
	BlocksCopy: BlocksCopy,
	Combine:    Combine,
	New:        func() hash.Hash { return New() },
	Cutoffs:    archCutoffs,
	FoldTable:  &foldTable,
	Wants:      archWants,
}

func TestKernel(t *testing.T) { kerneltest.Run(t, kernel) }

func FuzzKernel(f *testing.F) { kerneltest.Fuzz(f, kernel) }

func BenchmarkKernel(b *testing.B) { kerneltest.Bench(b, kernel) }

func BenchmarkKernelDRAM(b *testing.B) { kerneltest.BenchDRAM(b, kernel) }
`))

// entryTestTemplate writes the tests of updateEntry's targets: the AVX2
// tier's (entryTargetY) in every package, and for T10-DIF and CRC-64/NVME
// the AVX-512 one (entryTarget; CRC-32C's, which depends on its hybrid
// kernels' features, is tested beside them in crc32c_hybridz_amd64_test.go).
var entryTestTemplate = template.Must(template.New("entry").Parse(`{{.Warning}}

//go:build !purego

package {{.Pkg}}

import (
	"math/rand/v2"
	"testing"
	"unsafe"
{{if ne .Flag "crc32c"}}
	"golang.org/x/sys/cpu"
{{end}}
	"github.com/difctl/difctl/kernels/internal/impl"
)

// word is the code pointer a func variable holds, which updateEntry
// compares.
func word(f *func({{.Word}}, []byte) {{.Word}}) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(f))
}
{{if ne .Flag "crc32c"}}
// TestEntryTarget checks that updateEntry's own path is live under avx512
// where the CPU has the kernel's features: the dispatch variable then holds
// the same function value as entryTarget, which updateEntry compares word
// for word. (Were they to differ, every call would take the fallback:
// correct, and slower.)
func TestEntryTarget(t *testing.T) {
	if !hasFoldAVX512 || !cpu.X86.HasAVX512VL || !cpu.X86.HasAVX512DQ {
		if entryTarget != nil {
			t.Fatal("entryTarget is set on a CPU without the kernel's features")
		}
		t.Skip("the CPU lacks AVX-512 VPCLMULQDQ, VL or DQ")
	}
	defer impl.Reset(pkgName)
	if err := impl.Select(pkgName, "avx512"); err != nil {
		t.Fatal(err)
	}
	if word(&update) != word(&entryTarget) {
		t.Fatal("update under avx512 is not the word entryTarget holds")
	}
	if err := impl.Select(pkgName, "generic"); err != nil {
		t.Fatal(err)
	}
	if word(&update) == word(&entryTarget) {
		t.Fatal("update under generic is the word entryTarget holds")
	}
}
{{end}}
// TestEntryTargetY checks that updateEntry's jump to the AVX2 tier's
// kernel (updateEntryY) is live under avx2 where the CPU has its features,
// and under no other implementation: the dispatch variable then holds the
// same function value as entryTargetY, which updateEntry compares word for
// word. Update and Checksum under avx2 are then checked against the
// portable code at every length the kernel takes and past it, from
// several registers and alignments.
func TestEntryTargetY(t *testing.T) {
	if !{{.HasY}} {
		if entryTargetY != nil {
			t.Fatal("entryTargetY is set on a CPU without the kernel's features")
		}
		t.Skip("the CPU lacks AVX2 or VPCLMULQDQ")
	}
	defer impl.Reset(pkgName)
	for _, name := range impl.List(pkgName) {
		if !name.Available {
			continue
		}
		if err := impl.Select(pkgName, name.Name); err != nil {
			t.Fatal(err)
		}
		if got := word(&update) == word(&entryTargetY); got != (name.Name == "avx2") {
			t.Errorf("impl=%s: update is entryTargetY's word: %v", name.Name, got)
		}
	}
	if err := impl.Select(pkgName, "avx2"); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 1100+64)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	n := 1100
	if testing.Short() {
		n = 1040
	}
	for size := 0; size <= n; size++ {
		off := size % 64
		p := buf[off : off+size]
		crc := {{.Word}}(r.Uint64())
		if got, want := Update(crc, p), updateGeneric(crc, p); got != want {
			t.Fatalf("size=%d align=%d: Update %#x, want %#x", size, off, got, want)
		}
		if got, want := Checksum(p), updateGeneric(0, p); got != want {
			t.Fatalf("size=%d align=%d: Checksum %#x, want %#x", size, off, got, want)
		}
	}
}
`))
