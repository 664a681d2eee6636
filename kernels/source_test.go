package kernels

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// sourceFile is one parsed non-test Go file of a kernel package.
type sourceFile struct {
	path string
	fset *token.FileSet
	file *ast.File
}

// parseKernelSources parses every non-test Go file in the directories below
// this one, for every GOOS/GOARCH and build tag, skipping the directories
// the go tool ignores (a leading _ or ., testdata): the kernel packages and
// their internal packages, as the tests of the whole source tree see them.
func parseKernelSources(t *testing.T) []sourceFile {
	t.Helper()
	var out []sourceFile
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(name, "_") || strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if filepath.Dir(path) == "." || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		out = append(out, sourceFile{path: path, fset: fset, file: f})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("no kernel sources found below the package directory")
	}
	return out
}

// importName returns the name f refers to the package path by, or "" if f
// does not import it.
func importName(f *ast.File, path string) string {
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		if p != path {
			continue
		}
		if im.Name != nil {
			return im.Name.Name
		}
		return path[strings.LastIndex(path, "/")+1:]
	}
	return ""
}

// stringConsts returns the string constants declared at the top level of
// the files, by name.
func stringConsts(files []sourceFile) map[string]string {
	m := map[string]string{}
	for _, sf := range files {
		for _, d := range sf.file.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							m[n.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			}
		}
	}
	return m
}

// registeredPackages returns the package names the sources pass to
// impl.Register, a string literal or a constant of the same directory.
func registeredPackages(t *testing.T, files []sourceFile) map[string]bool {
	t.Helper()
	byDir := map[string][]sourceFile{}
	for _, sf := range files {
		byDir[filepath.Dir(sf.path)] = append(byDir[filepath.Dir(sf.path)], sf)
	}
	const implPath = "github.com/difctl/difctl/kernels/internal/impl"
	out := map[string]bool{}
	for _, dir := range byDir {
		consts := stringConsts(dir)
		for _, sf := range dir {
			name := importName(sf.file, implPath)
			if name == "" {
				continue
			}
			ast.Inspect(sf.file, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || !isSelector(call.Fun, name, "Register") || len(call.Args) == 0 {
					return true
				}
				switch a := call.Args[0].(type) {
				case *ast.BasicLit:
					s, _ := strconv.Unquote(a.Value)
					out[s] = true
				case *ast.Ident:
					s, ok := consts[a.Name]
					if !ok {
						t.Errorf("%s: impl.Register with package %s, not a string constant of the package", sf.fset.Position(call.Pos()), a.Name)
					}
					out[s] = true
				default:
					t.Errorf("%s: impl.Register with a package name that is neither a literal nor a constant", sf.fset.Position(call.Pos()))
				}
				return true
			})
		}
	}
	return out
}

// isSelector reports whether e is x.sel.
func isSelector(e ast.Expr, x, sel string) bool {
	s, ok := e.(*ast.SelectorExpr)
	if !ok || s.Sel.Name != sel {
		return false
	}
	id, ok := s.X.(*ast.Ident)
	return ok && id.Name == x
}
