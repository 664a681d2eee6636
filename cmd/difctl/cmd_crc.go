package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
)

// crcOptions are the inputs of runCrc.
type crcOptions struct {
	globalOptions
	Alg   *algorithm // --alg; default t10dif
	Files []string   // the files to read; none, or "-", means Stdin
	Stdin io.Reader
}

// crcRecord is the --json result for one input.
type crcRecord struct {
	header
	Alg   string `json:"alg"`   // t10dif, crc32c or crc64nvme
	CRC   string `json:"crc"`   // hex, zero-padded to the width of the CRC
	Bytes int64  `json:"bytes"` // bytes read
	File  string `json:"file"`  // the path, or "-" for stdin
}

func (*crcRecord) recordType() string { return "crc" }

func newCrcCmd(g *globalOptions, stdin io.Reader) *cobra.Command {
	alg := &algFlag{alg: algorithms[0]}
	cmd := &cobra.Command{
		Use:   "crc [--alg ALG] [FILE...]",
		Short: "Print the CRC and byte count of files, like cksum",
		Long: `Print the CRC, the byte count and the name of each FILE, like cksum(1),
with the CRCs of protection information: t10dif (CRC-16/T10-DIF, the
default), crc32c (CRC-32C) or crc64nvme (CRC-64/NVME). The CRC is printed
in hexadecimal, as many digits as its width. With no FILE, or when FILE is
-, read standard input; with no FILE the name is left out, as cksum does.
Files are streamed, never read whole. An unreadable file is reported and
the others still checked.

` + exitCodesHelp(exitOK, exitOperational, exitUsage, exitCancelled),
		Example: `  difctl crc disk.img
  difctl crc --alg crc64nvme a.bin b.bin
  printf 123456789 | difctl crc --alg crc32c`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCrc(cmd.Context(), crcOptions{
				globalOptions: *g,
				Alg:           alg.alg,
				Files:         args,
				Stdin:         stdin,
			}, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().Var(alg, "alg", "CRC algorithm: "+algorithmNames())
	return cmd
}

// crcBufSize is the read size: large enough for the kernels' wide paths and
// for few system calls, small enough not to matter.
const crcBufSize = 1 << 20

func runCrc(ctx context.Context, opts crcOptions, stdout, stderr io.Writer) error {
	out := newOutput(stdout, opts.JSON)
	files := opts.Files
	if len(files) == 0 {
		files = []string{""} // stdin, unnamed
	}
	buf := make([]byte, crcBufSize)
	var st status
	for _, name := range files {
		crc, n, err := crcOne(ctx, opts, name, buf, stderr)
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			out.itemError(stderr, displayName(name), err)
			st.add(exitOperational)
			continue
		}
		if out.json {
			err = out.emit(&crcRecord{Alg: opts.Alg.name, CRC: opts.Alg.hex(crc), Bytes: n, File: displayName(name)})
		} else if name == "" {
			_, err = fmt.Fprintf(out.w, "%s %d\n", opts.Alg.hex(crc), n)
		} else {
			_, err = fmt.Fprintf(out.w, "%s %d %s\n", opts.Alg.hex(crc), n, name)
		}
		if err != nil {
			return fmt.Errorf("write output: %w", err)
		}
	}
	return st.err()
}

// crcOne streams one input through the algorithm. name "" or "-" is stdin.
func crcOne(ctx context.Context, opts crcOptions, name string, buf []byte, stderr io.Writer) (crc uint64, n int64, err error) {
	r := opts.Stdin
	if r == nil {
		r = eofReader{}
	}
	total := int64(-1)
	if name != "" && name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return 0, 0, err
		}
		defer f.Close()
		r, total = f, inputSize(f)
	}
	p := newProgress(stderr, opts.Quiet, total, name)
	defer p.Finish()
	for {
		if err := ctx.Err(); err != nil {
			return crc, n, context.Cause(ctx)
		}
		m, err := r.Read(buf)
		crc = opts.Alg.update(crc, buf[:m])
		n += int64(m)
		p.Add(int64(m))
		if err == io.EOF {
			return crc, n, nil
		}
		if err != nil {
			return crc, n, err
		}
	}
}
