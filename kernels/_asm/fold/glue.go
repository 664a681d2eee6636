package main

import (
	"bytes"
	"strings"
	"text/template"

	"github.com/difctl/difctl/kernels/_asm/internal/scaffold"
)

// glue is what the templates of the Go files know.
type glue struct {
	crcSpec
	Warning string
	Word    string
	Kernels []glueKernel // in the order of the assembly
	Best    []glueKernel // best first, for the registry
	Order   string       // the reduction, for the doc comments
	// Table offsets.
	Fold, Final, Mu, Poly, Rev, Size int
}

type glueKernel struct {
	vecSpec
	Min int
	Sub bool // BlocksCopy takes the sub-block path for contiguous 4 KiB blocks
	// Tab is the table the Update and Blocks kernels read: foldTables, or
	// foldTablesRefl for the bitrev kernels (the copying kernels read
	// foldTables).
	Tab string
	// Shuf: the bitrev kernel has a byte-reversing twin for short inputs,
	// foldUpdate<Name>Shuf, below foldBitrevMin bytes.
	Shuf bool
	// Seq: BlocksCopy of blocks of foldSeqMinBlockLen bytes and more runs
	// foldBlocksCopy<Name>Seq, one block at a time.
	Seq bool
}

// The template's view of crcSpec's fields.
func (g glue) Pkg() string     { return g.pkg }
func (g glue) Tail() string    { return g.tail }
func (g glue) SubBlocks() bool { return g.subBlocks }
func (g glue) Bitrev() bool    { return g.bitrev }
func (g glue) BitrevMin() int  { return bitrevMin }

// NeedsX86 reports whether a feature check reads internal/x86.
func (g glue) NeedsX86() bool {
	for _, k := range g.Kernels {
		if strings.Contains(k.has, "x86.") {
			return true
		}
	}
	return false
}

func (g glue) MinBlockLen() int   { return foldMinBlockLen }
func (k glueKernel) Name() string { return k.name }
func (k glueKernel) Impl() string { return k.impl }
func (k glueKernel) Bytes() int   { return k.bytes }
func (k glueKernel) Accs() int    { return k.accs }
func (k glueKernel) Group() int   { return k.group }
func (k glueKernel) Desc() string { return k.desc }
func (k glueKernel) CPU() string  { return k.cpu }
func (k glueKernel) Has() string  { return k.has }
func (k glueKernel) Legacy() bool { return k.legacy }

// SeqMinBlockLen is seqMinBlockLen, for the template.
func (g glue) SeqMinBlockLen() int { return seqMinBlockLen }

func render(t *template.Template, spec crcSpec, cmd []string) ([]byte, error) {
	g := glue{crcSpec: spec, Warning: scaffold.Warning(cmd), Word: scaffold.Word(spec.width).String(),
		Order: "reflected",
		Fold:  tableFold, Final: tableFinal, Mu: tableMu, Poly: tablePoly, Rev: tableRev, Size: tableSize}
	if !spec.reflected {
		g.Order = "unreflected, lanes loaded byte-reversed"
	}
	for _, v := range spec.kernels() {
		tab := "foldTables"
		if spec.bitrev && v.bytes == 64 {
			tab = "foldTablesRefl"
		}
		g.Kernels = append(g.Kernels, glueKernel{vecSpec: v, Min: spec.min[v.name], Sub: spec.subBlocks && v.bytes == 16, Tab: tab,
			Shuf: spec.bitrev && v.bytes == 64, Seq: v.bytes == 64})
	}
	for i := len(g.Kernels) - 1; i >= 0; i-- {
		g.Best = append(g.Best, g.Kernels[i])
	}
	var b bytes.Buffer
	if err := t.Execute(&b, g); err != nil {
		return nil, err
	}
	return scaffold.Go(b.Bytes())
}

var glueTemplate = template.Must(template.New("glue").Parse(`{{.Warning}}

//go:build !purego

package {{.Pkg}}

import (
{{- if .SubBlocks}}
	"sync"
{{end}}
	"github.com/difctl/difctl/kernels/internal/crcmath"
	"github.com/difctl/difctl/kernels/internal/foldgo"
	"github.com/difctl/difctl/kernels/internal/impl"
{{- if .NeedsX86}}
	"github.com/difctl/difctl/kernels/internal/x86"
{{- end}}
	"golang.org/x/sys/cpu"
)

// Byte offsets of the crcmath.RevFoldTable fields that the kernels assume.
const (
	foldTableFold  = {{.Fold}}
	foldTableFinal = {{.Final}}
	foldTableMu    = {{.Mu}}
	foldTablePoly  = {{.Poly}}
	foldTableRev   = {{.Rev}}
	foldTableSize  = {{.Size}}
)

// Shapes of the kernels: bytes per vector, Update accumulators, blocks
// interleaved by Blocks.
const (
{{- range .Kernels}}
	foldVec{{.Name}} = {{.Bytes}}
	foldAccs{{.Name}} = {{.Accs}}
	foldGroup{{.Name}} = {{.Group}}
{{- end}}
)

// Below foldMinX bytes Update runs updateGeneric rather than kernel X
// (docs/performance.md, "Why the kernels are shaped as they are"). Blocks folds groups of blocks from
// foldMinBlockLen bytes on; shorter blocks go one at a time through Update.
const (
{{- range .Kernels}}
	foldMin{{.Name}} = {{.Min}}
{{- end}}
	foldMinBlockLen = {{.MinBlockLen}}
)

// From foldSeqMinBlockLen bytes a block BlocksCopy runs the ZMM copying
// kernel's one-block-at-a-time form (docs/perf/copy-avx512.md).
const foldSeqMinBlockLen = {{.SeqMinBlockLen}}

// foldTables is what the kernels read: foldTable and its Fold constants
// in reverse order.
var foldTables = crcmath.NewRevFoldTable(&foldTable)
{{- if .Bitrev}}

// foldTablesRefl is what the AVX-512 kernels read: they fold as the
// reflected CRC of the polynomial over bit-reversed bytes (foldTableRefl).
var foldTablesRefl = crcmath.NewRevFoldTable(&foldTableRefl)

// Below foldBitrevMin bytes Update runs foldUpdateAVX512Shuf, which
// byte-reverses its lanes, rather than foldUpdateAVX512: a short Update is
// bound by its chain's latency, which VGF2P8AFFINEQB on every load
// lengthens, a long one by port 5, which VPSHUFB takes
// (docs/perf/fold-avx512.md).
const foldBitrevMin = {{.BitrevMin}}
{{- end}}

// The CPU features of the fold kernels, checked once.
var (
{{- range .Best}}
	hasFold{{.Name}} = {{.Has}}
{{- end}}
)

// registerFold registers the fold kernels as implementations, best first.
func registerFold() {
{{- range .Best}}
	impl.Register(pkgName, "{{.Impl}}", hasFold{{.Name}}, func() {
		update, blocks, blocksCopy = update{{.Name}}, blocks{{.Name}}, blocksCopy{{.Name}}
	})
{{- end}}
}
{{range .Best}}
// update{{.Name}} is Update by foldUpdate{{.Name}}, or by updateGeneric below
// foldMin{{.Name}} bytes, both called directly.
func update{{.Name}}(crc {{$.Word}}, p []byte) {{$.Word}} {
	if len(p) < foldMin{{.Name}} {
		return updateGeneric(crc, p)
	}
{{- if .Shuf}}
	if len(p) < foldBitrevMin {
		return foldUpdate{{.Name}}Shuf(crc, p, foldTables)
	}
{{- end}}
	return foldUpdate{{.Name}}(crc, p, {{.Tab}})
}

func blocks{{.Name}}(dst []{{$.Word}}, p []byte, blockLen, stride int) {
	foldgo.Blocks(dst, p, blockLen, stride, foldVec{{.Name}}, foldGroup{{.Name}}, foldMinBlockLen, {{.Tab}},
		foldBlocks{{.Name}}, {{$.Tail}}, update{{.Name}})
}

func blocksCopy{{.Name}}(dst []{{$.Word}}, q, p []byte, blockLen, stride int) {
{{- if .Seq}}
	if blockLen >= foldSeqMinBlockLen {
		foldgo.BlocksCopy(dst, q, p, blockLen, stride, foldVec{{.Name}}, 1, foldMinBlockLen, foldTables,
			foldBlocksCopy{{.Name}}Seq, {{$.Tail}}, update{{.Name}})
		return
	}
{{- end}}
{{- if .Sub}}
	if foldgo.UseSubBlocks(blockLen, stride) {
		blocksCopySub{{.Name}}(dst, q, p, blockLen)
		return
	}
{{- end}}
	foldgo.BlocksCopy(dst, q, p, blockLen, stride, foldVec{{.Name}}, foldGroup{{.Name}}, foldMinBlockLen, foldTables,
		foldBlocksCopy{{.Name}}, {{$.Tail}}, update{{.Name}})
}
{{if .Sub}}
// blocksCopySub{{.Name}} is BlocksCopy over contiguous 4 KiB blocks (the
// sub-block path of foldgo.UseSubBlocks): foldBlocksCopy{{.Name}} over the
// blocks' 1 KiB sub-blocks, whose streams do not share L1 sets, and each
// block's partial CRCs joined (docs/performance.md, "Why the kernels are shaped as they are"). The kernel is
// called by name, not through a parameter, so that the partial CRCs stay
// on the stack.
func blocksCopySub{{.Name}}(dst []{{$.Word}}, q, p []byte, blockLen int) {
	const s = foldgo.SubBlockLen
	j := foldgo.NewJoiner(dst, blockLen/s, subShift())
	var part [subChunk]{{$.Word}}
	for o, end := 0, len(dst)*blockLen; o < end; {
		k := min(subChunk, (end-o)/s)
		foldBlocksCopy{{.Name}}(part[:k], q[o:], p[o:], s, s, foldTables)
		j.Add(part[:k])
		o += k * s
	}
}
{{end}}
{{- end}}
{{- if .SubBlocks}}
// subChunk is the number of sub-blocks per kernel call of the sub-block
// paths: their partial CRCs are kept in arrays of this length on the
// stack, and it is a multiple of every kernel's group.
const subChunk = 64

// subShift is L_1024 of this CRC (foldgo.Shift), built on first use.
var subShift = sync.OnceValue(func() *foldgo.Shift[{{.Word}}] {
	return foldgo.NewShift[{{.Word}}](Params, foldgo.SubBlockLen)
})
{{end}}
{{- range .Kernels}}
{{- if .Shuf}}
// foldUpdate{{.Name}}Shuf is foldUpdate{{.Name}} that folds the CRC as it is,
// its lanes byte-reversed (VPSHUFB), from foldTables.
//
//go:noescape
func foldUpdate{{.Name}}Shuf(crc {{$.Word}}, p []byte, tab *crcmath.RevFoldTable) {{$.Word}}
{{end}}
// foldUpdate{{.Name}} returns crc (finalised, as Update takes it) updated with p,
// by carry-less folding with {{.Desc}}: {{.Accs}}
// accumulators of {{.Bytes}} bytes while more than {{.Accs}} vectors remain, then
// every vector folded straight into the last 16-byte lane, the tail of
// len(p)%16 bytes shifted in, and Barrett reduction ({{$.Order}}).
//
// Preconditions: len(p) >= 16; tab is {{.Tab}}; the CPU has
// {{.CPU}}. It reads only p.
//
//go:noescape
func foldUpdate{{.Name}}(crc {{$.Word}}, p []byte, tab *crcmath.RevFoldTable) {{$.Word}}

// foldBlocks{{.Name}} sets dst[i] to the CRC (from the initial value) of
// p[i*stride:][:blockLen] for every i, folding {{.Group}} blocks at once, each with its
// own {{.Bytes}}-byte accumulator, with {{.Desc}}.
//
// Preconditions: len(dst) is a positive multiple of {{.Group}}; blockLen is a multiple of
// 16 and at least {{.Bytes}}; stride >= blockLen;
// len(p) >= (len(dst)-1)*stride + blockLen; tab is {{.Tab}};
// the CPU has {{.CPU}}.
//
//go:noescape
func foldBlocks{{.Name}}(dst []{{$.Word}}, p []byte, blockLen, stride int, tab *crcmath.RevFoldTable)

// foldBlocksCopy{{.Name}} is foldBlocks{{.Name}} that also copies the blocks to q:
// every vector it loads from p[i*stride:][:blockLen] it stores, as loaded, to
// q at the same offset, and folds that register, so dst[i] is the CRC of
// the bytes written to q. It writes nothing else of q.
//
// Preconditions: those of foldBlocks{{.Name}}, with tab foldTables, and the same for q as for p; the
// blocks of q do not overlap those of p.
//
//go:noescape
func foldBlocksCopy{{.Name}}(dst []{{$.Word}}, q, p []byte, blockLen, stride int, tab *crcmath.RevFoldTable)
{{- if .Seq}}

// foldBlocksCopy{{.Name}}Seq is foldBlocksCopy{{.Name}} one block at a time:
// each block's vectors in order, one stream of loads and one of stores, as
// a copy makes them.
//
// Preconditions: those of foldBlocksCopy{{.Name}}, with any positive len(dst).
//
//go:noescape
func foldBlocksCopy{{.Name}}Seq(dst []{{$.Word}}, q, p []byte, blockLen, stride int, tab *crcmath.RevFoldTable)
{{- end}}
{{end}}`))

var glueTestTemplate = template.Must(template.New("gluetest").Parse(`{{.Warning}}

//go:build !purego

package {{.Pkg}}

import (
	"testing"

{{- if .SubBlocks}}
	"github.com/difctl/difctl/kernels/internal/crcmath"
	"github.com/difctl/difctl/kernels/internal/foldgo"
	"github.com/difctl/difctl/kernels/internal/impl"
{{- end}}
	"github.com/difctl/difctl/kernels/internal/kerneltest"
)

// The fold kernels are registered, available exactly where the CPU can run
// them, and the best of them active.
func TestFoldImplementations(t *testing.T) {
	kerneltest.CheckFoldImplementations(t, kernel{{range .Kernels}}, "{{.Impl}}"{{end}})
}

// The kernels read crcmath.RevFoldTable through a pointer at the offsets the
// generator assumed (zfold_amd64.go).
func TestFoldTableOffsets(t *testing.T) {
	kerneltest.CheckFoldOffsets(t, kerneltest.FoldOffsets{
		Fold: foldTableFold, Final: foldTableFinal, Mu: foldTableMu,
		Poly: foldTablePoly, Rev: foldTableRev, Size: foldTableSize,
	})
}

// foldCutoffs are the lengths where the fold wrappers change strategy: the
// table/fold crossover of Update, the shortest block Blocks interleaves, the
// vector widths (the kernels' single-vector and 16-byte-lane paths) and the
// lengths from which the main loops run (accumulators times vector bytes).
var foldCutoffs = []int{
	foldMinBlockLen,
{{- if .Bitrev}}
	foldBitrevMin,
{{- end}}
{{- range .Kernels}}
	foldMin{{.Name}}, foldVec{{.Name}}, foldVec{{.Name}} * foldAccs{{.Name}},
{{- end}}
}
{{- if .SubBlocks}}

// The sub-block path hands the kernels whole groups: the sub-blocks of a
// block of foldgo.SubBlockAlias bytes, and of each call, fill groups.
func TestSubBlockGroups(t *testing.T) {
	per := foldgo.SubBlockAlias / foldgo.SubBlockLen
	for _, g := range []int{ {{- range .Kernels}}{{if .Sub}}foldGroup{{.Name}}, {{end}}{{end -}} } {
		if per%g != 0 || subChunk%g != 0 {
			t.Errorf("group of %d blocks: %d sub-blocks a block, %d a call", g, per, subChunk)
		}
	}
}

// The sub-block path allocates nothing: the partial CRCs stay on the stack.
func TestSubBlockAllocs(t *testing.T) {
	defer impl.Reset(pkgName)
	p, q, dst := make([]byte, 1<<20), make([]byte, 1<<20), make([]{{.Word}}, 256)
	for _, name := range []string{ {{- range .Kernels}}{{if .Sub}}"{{.Impl}}", {{end}}{{end -}} } {
		if err := impl.Select(pkgName, name); err != nil {
			t.Logf("%s: %v", name, err)
			continue
		}
		if n := testing.AllocsPerRun(10, func() {
			if BlocksCopy(dst, q, p, 4096, 4096) != nil {
				t.Fatal("refused")
			}
		}); n != 0 {
			t.Errorf("%s: %v allocations a call", name, n)
		}
	}
}

// BenchmarkBlocksCopyPaths: BlocksCopy over contiguous blocks by the copying
// kernels over whole blocks (path=whole) and over 1 KiB sub-blocks with the
// partial CRCs joined (path=sub), side by side (benchstat -col /path). The
// XMM kernels take path=sub for 4 KiB blocks, the others path=whole, which
// streams faster from memory (docs/performance.md, "Why the kernels are shaped as they are").
func BenchmarkBlocksCopyPaths(b *testing.B) {
	dst := make([]{{.Word}}, 1<<10)
	for _, k := range []struct {
		name  string
		has   bool
		vec   int
		group int
		copy  func([]{{.Word}}, []byte, []byte, int, int, *crcmath.RevFoldTable)
		upd   func({{.Word}}, []byte) {{.Word}}
	}{
{{- range .Kernels}}{{if ne .Name "AVX512"}}
		{"{{.Impl}}", hasFold{{.Name}}, foldVec{{.Name}}, foldGroup{{.Name}}, foldBlocksCopy{{.Name}}, update{{.Name}}},
{{- end}}{{end}}
	} {
		if !k.has {
			continue
		}
		b.Run("impl="+k.name, func(b *testing.B) {
			kerneltest.BenchCopyPaths(b, []kerneltest.CopyPath{
				{Name: "whole", Run: func(q, p []byte, bl int) uint64 {
					n := len(p) / bl
					foldgo.BlocksCopy(dst[:n], q, p, bl, bl, k.vec, k.group, foldMinBlockLen, foldTables, k.copy, {{.Tail}}, k.upd)
					return uint64(dst[n-1])
				}},
				{Name: "sub", Run: func(q, p []byte, bl int) uint64 {
					n := len(p) / bl
					subBlocksCopyWith(k.copy, dst[:n], q, p, bl)
					return uint64(dst[n-1])
				}},
			}, []int{4096, 8192, 65536})
		})
	}
}

// subBlocksCopyWith is the sub-block path with the kernel as a parameter
// (its scratch array then escapes), for the benchmark.
func subBlocksCopyWith(kernel func([]{{.Word}}, []byte, []byte, int, int, *crcmath.RevFoldTable), dst []{{.Word}}, q, p []byte, blockLen int) {
	const s = foldgo.SubBlockLen
	j := foldgo.NewJoiner(dst, blockLen/s, subShift())
	var part [subChunk]{{.Word}}
	for o, end := 0, len(dst)*blockLen; o < end; {
		k := min(subChunk, (end-o)/s)
		kernel(part[:k], q[o:], p[o:], s, s, foldTables)
		j.Add(part[:k])
		o += k * s
	}
}
{{- end}}
`))
