package assemble

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/backends/hier"
	"github.com/godist/godist/backends/shm"
)

const module = "github.com/godist/godist"

// deps returns the module's packages that pkg (a path relative to the
// module root) imports, directly or not, leaving tests out.
func deps(t *testing.T, root, pkg string) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	var walk func(rel string)
	walk = func(rel string) {
		p, err := build.ImportDir(filepath.Join(root, rel), 0)
		if err != nil {
			var noGo *build.NoGoError
			if ok := asNoGo(err, &noGo); ok {
				return
			}
			require.NoError(t, err, rel)
		}
		for _, imp := range p.Imports {
			if dep, ok := strings.CutPrefix(imp, module+"/"); ok && !seen[dep] {
				seen[dep] = true
				walk(dep)
			}
		}
	}
	walk(pkg)
	return seen
}

func asNoGo(err error, target **build.NoGoError) bool {
	e, ok := err.(*build.NoGoError)
	if ok {
		*target = e
	}
	return ok
}

// packages lists the module's package folders under dir.
func packages(t *testing.T, root, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if n := d.Name(); path != filepath.Join(root, dir) && (strings.HasPrefix(n, ".") || n == "testdata" ||
			n == "python") {
			return filepath.SkipDir
		}
		if m, _ := filepath.Glob(filepath.Join(path, "*.go")); len(m) > 0 {
			rel, _ := filepath.Rel(root, path)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

// TestLayers checks the dependency rules of docs/architecture.md: the
// engine imports no backend, a backend imports no other backend (nor the
// engine's root package, capi or this package), the stores import
// nothing of ours but the auth handshake, which imports nothing of ours;
// the algorithm choices (libgodist/algo) import nothing of ours, and the
// engine and the offloads that choose algorithms ask them.
func TestLayers(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	for _, pkg := range packages(t, root, "libgodist") {
		for dep := range deps(t, root, pkg) {
			require.False(t, strings.HasPrefix(dep, "backends/") || dep == "assemble" || dep == "capi",
				"%s imports %s: the engine sees backends only through libgodist/backend", pkg, dep)
		}
	}
	backends := packages(t, root, "backends")
	require.NotEmpty(t, backends)
	for _, pkg := range backends {
		name := strings.Split(pkg, "/")[1]
		for dep := range deps(t, root, pkg) {
			other := strings.HasPrefix(dep, "backends/") && strings.Split(dep, "/")[1] != name
			require.False(t, other || dep == "libgodist" || dep == "assemble" || dep == "capi",
				"%s imports %s: a backend imports only libgodist's interfaces and helpers", pkg, dep)
		}
	}
	for _, pkg := range packages(t, root, "store") {
		for dep := range deps(t, root, pkg) {
			require.True(t, strings.HasPrefix(dep, "store") || dep == "auth",
				"%s imports %s: the stores stand alone (but for the auth handshake)", pkg, dep)
		}
	}
	for dep := range deps(t, root, "auth") {
		require.Fail(t, "auth imports "+dep, "the auth handshake imports nothing of ours")
	}
	for dep := range deps(t, root, "libgodist/algo") {
		require.Fail(t, "libgodist/algo imports "+dep, "the algorithm choices import nothing of ours")
	}
	for _, pkg := range []string{"libgodist", "backends/shm", "backends/hier"} {
		require.Contains(t, imports(t, root, pkg), "libgodist/algo", "%s chooses its algorithms in libgodist/algo", pkg)
	}
}

// imports returns the module's packages that pkg imports directly,
// leaving tests out.
func imports(t *testing.T, root, pkg string) []string {
	t.Helper()
	p, err := build.ImportDir(filepath.Join(root, pkg), 0)
	var noGo *build.NoGoError
	if err != nil && asNoGo(err, &noGo) {
		return nil
	}
	require.NoError(t, err, pkg)
	var out []string
	for _, imp := range p.Imports {
		if dep, ok := strings.CutPrefix(imp, module+"/"); ok {
			out = append(out, dep)
		}
	}
	return out
}

// TestOneCompositionRoot checks that assemble is the only package that
// picks backends: no package outside backends/ imports one, but assemble
// (a backend may import the packages of its own folder).
func TestOneCompositionRoot(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	all := packages(t, root, ".")
	require.Contains(t, all, "capi")
	for _, pkg := range all {
		for _, dep := range imports(t, root, pkg) {
			if !strings.HasPrefix(dep, "backends/") || pkg == "assemble" {
				continue
			}
			own := strings.HasPrefix(pkg, "backends/") && strings.Split(pkg, "/")[1] == strings.Split(dep, "/")[1]
			require.True(t, own, "%s imports %s: only assemble chooses backends (add a function there)", pkg, dep)
		}
	}
}

// capiImports are the packages capi may import: the composition root, the
// engine's API and the types its errors and options carry, the stores,
// the auth handshake and the build stamp. Not libgodist/backend: what an
// op is on a device (its calls) is the engine's to decide.
var capiImports = []string{"assemble", "auth", "internal/buildinfo", "libgodist", "libgodist/glog",
	"libgodist/gosched", "libgodist/reduce", "libgodist/transport", "store"}

// TestCAPIHasNoLogic checks what docs/architecture.md says of capi: it
// converts C arguments and results and holds no logic. It imports only
// capiImports, and none of its functions decides anything by a name: no
// switch case on a string and no comparison with a string other than ""
// (a name is passed through, to the engine, the stores or assemble, which
// decide by it).
func TestCAPIHasNoLogic(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	for _, dep := range imports(t, root, "capi") {
		require.True(t, slices.Contains(capiImports, dep),
			"capi imports %s: capi converts arguments for the engine, the stores and assemble", dep)
	}
	files, err := filepath.Glob(filepath.Join(root, "capi", "*.go"))
	require.NoError(t, err)
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			var lits []ast.Expr
			switch x := n.(type) {
			case *ast.CaseClause:
				lits = x.List
			case *ast.BinaryExpr:
				if x.Op == token.EQL || x.Op == token.NEQ {
					lits = []ast.Expr{x.X, x.Y}
				}
			}
			for _, e := range lits {
				if l, ok := e.(*ast.BasicLit); ok && l.Kind == token.STRING && l.Value != `""` {
					require.Fail(t, "capi decides by a name", "%s: %s: move the decision to the package that "+
						"owns the name (libgodist, store or assemble)", fset.Position(l.Pos()), l.Value)
				}
			}
			return true
		})
	}
}

// envReaders are the functions that read the process's environment, by
// package.
var envReaders = map[string][]string{
	"os":      {"Getenv", "LookupEnv", "Environ", "ExpandEnv"},
	"syscall": {"Getenv", "Environ"},
}

// TestReadNoEnvironment checks what docs/architecture.md says of
// configuration: it reaches Go through the init call. In the library's
// layers (the engine, the backends, the stores, the auth handshake and
// this package) no code but tests reads the environment, in Go or in C
// (getenv); capi alone hands it over, once, when the library loads
// (Configure).
func TestReadNoEnvironment(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	cGetenv := regexp.MustCompile(`\b(secure_)?getenv\s*\(`)
	fset := token.NewFileSet()
	checked := 0
	for _, dir := range []string{"libgodist", "backends", "store", "auth", "assemble"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if n := d.Name(); strings.HasPrefix(n, ".") || n == "testdata" || n == "python" {
					return filepath.SkipDir
				}
				return nil
			}
			rel, _ := filepath.Rel(root, path)
			switch {
			case strings.HasSuffix(path, "_test.go"):
			case strings.HasSuffix(path, ".go"):
				f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
				require.NoError(t, err)
				checked++
				names := map[string]string{} // local name -> imported package
				for _, imp := range f.Imports {
					p, _ := strconv.Unquote(imp.Path.Value)
					local := p
					if imp.Name != nil {
						local = imp.Name.Name
					}
					names[local] = p
				}
				ast.Inspect(f, func(n ast.Node) bool {
					sel, ok := n.(*ast.SelectorExpr)
					if !ok {
						return true
					}
					if x, ok := sel.X.(*ast.Ident); ok && slices.Contains(envReaders[names[x.Name]], sel.Sel.Name) {
						require.Fail(t, "reads the environment", "%s: %s.%s: take the setting from a Config "+
							"that assemble.Configure sets", fset.Position(sel.Pos()), names[x.Name], sel.Sel.Name)
					}
					return true
				})
			case strings.HasSuffix(path, ".c") || strings.HasSuffix(path, ".h"):
				if strings.Contains(filepath.ToSlash(rel), "/fake") { // test fixtures (backends/nccl/fakenccl)
					return nil
				}
				b, err := os.ReadFile(path)
				require.NoError(t, err)
				checked++
				require.False(t, cGetenv.Match(b), "%s calls getenv: take the setting from Go", rel)
			}
			return nil
		})
		require.NoError(t, err)
	}
	require.Greater(t, checked, 50)
}

func TestBackends(t *testing.T) {
	set, err := Backends(Options{})
	require.NoError(t, err)
	require.NotNil(t, set.Fabric)
	require.Len(t, set.Offloaders, 2, "shared memory by default: one host, then each host of many")
	require.IsType(t, &shm.Offloader{}, set.Offloaders[0])
	require.IsType(t, &hier.Offloader{}, set.Offloaders[1])
	set, err = Backends(Options{Transport: TransportTCP})
	require.NoError(t, err)
	require.Empty(t, set.Offloaders)
	_, err = Backends(Options{Transport: "carrier-pigeon"})
	require.ErrorContains(t, err, `unknown transport "carrier-pigeon" (want one of ["auto" "tcp" "mpi"])`)
	for _, name := range TransportNames {
		_, err = Backends(Options{Transport: name})
		require.NoError(t, err, name)
	}
}
