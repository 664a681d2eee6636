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

const (
	cpuPath = "golang.org/x/sys/cpu"
	x86Path = "github.com/difctl/difctl/kernels/internal/x86"
)

// featureTest names a CPU feature test in the source: the GOARCH it
// belongs to and the expression with the import names made canonical,
// such as "cpu.X86.HasAVX2" or "x86.HasVPCLMULQDQ".
type featureTest struct{ arch, expr string }

// cpuArch is the GOARCH of each x/sys/cpu feature variable the kernels
// may test.
var cpuArch = map[string]string{"X86": "amd64", "ARM64": "arm64"}

// asFeatureTest reports whether e tests a CPU feature, given the names f
// imports x/sys/cpu and internal/x86 by; ok with an empty arch means a
// feature variable of an architecture without a feature table.
func asFeatureTest(e ast.Expr, cpuName, x86Name string) (ft featureTest, ok bool) {
	s, isSel := e.(*ast.SelectorExpr)
	if !isSel || !strings.HasPrefix(s.Sel.Name, "Has") {
		return ft, false
	}
	switch x := s.X.(type) {
	case *ast.Ident:
		if x86Name != "" && x.Name == x86Name {
			return featureTest{"amd64", "x86." + s.Sel.Name}, true
		}
	case *ast.SelectorExpr:
		if id, isID := x.X.(*ast.Ident); isID && cpuName != "" && id.Name == cpuName {
			return featureTest{cpuArch[x.Sel.Name], "cpu." + x.Sel.Name + "." + s.Sel.Name}, true
		}
	}
	return ft, false
}

// dispatchFeatureTests returns every CPU feature test in the kernel
// sources, with where each is made.
func dispatchFeatureTests(files []sourceFile) map[featureTest][]string {
	out := map[featureTest][]string{}
	for _, sf := range files {
		cpuName, x86Name := importName(sf.file, cpuPath), importName(sf.file, x86Path)
		if cpuName == "" && x86Name == "" {
			continue
		}
		ast.Inspect(sf.file, func(n ast.Node) bool {
			e, ok := n.(ast.Expr)
			if !ok {
				return true
			}
			if ft, ok := asFeatureTest(e, cpuName, x86Name); ok {
				out[ft] = append(out[ft], sf.fset.Position(e.Pos()).String())
				return false
			}
			return true
		})
	}
	return out
}

// tableFeatureTests returns the feature tests archFeatures in kernels.go
// lists, each with its name.
func tableFeatureTests(t *testing.T) map[featureTest]string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "kernels.go", nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	cpuName, x86Name := importName(f, cpuPath), importName(f, x86Path)
	out := map[featureTest]string{}
	var found bool
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || vs.Names[0].Name != "archFeatures" {
			return true
		}
		found = true
		for _, kv := range vs.Values[0].(*ast.CompositeLit).Elts {
			kv := kv.(*ast.KeyValueExpr)
			arch, _ := strconv.Unquote(kv.Key.(*ast.BasicLit).Value)
			for _, el := range kv.Value.(*ast.CompositeLit).Elts {
				el := el.(*ast.CompositeLit)
				name, _ := strconv.Unquote(el.Elts[0].(*ast.BasicLit).Value)
				ft, ok := asFeatureTest(el.Elts[1], cpuName, x86Name)
				if !ok || ft.arch != arch {
					t.Errorf("%s: archFeatures[%q] entry %q is not a feature test of %s", fset.Position(el.Pos()), arch, name, arch)
					continue
				}
				out[ft] = name
			}
		}
		return false
	})
	if !found {
		t.Fatal("kernels.go declares no archFeatures")
	}
	return out
}
