package mpi

import (
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// shimCompileFlags are the flags mpicc compiles with (its include
// directories and macros), without its link flags: the shims link no MPI
// library (the Makefile's mpi-shims and setup.py do the same).
func shimCompileFlags(t *testing.T, mpicc string) []string {
	t.Helper()
	query := "-showme:compile" // Open MPI's wrapper
	if strings.Contains(mpicc, "mpich") {
		query = "-compile_info" // MPICH's: the whole compile command
	}
	out, err := exec.Command(mpicc, query).Output()
	if err != nil {
		t.Fatalf("%s %s: %v", mpicc, query, err)
	}
	var flags []string
	for _, f := range strings.Fields(string(out)) {
		if strings.HasPrefix(f, "-I") || strings.HasPrefix(f, "-D") || f == "-pthread" {
			flags = append(flags, f)
		}
	}
	return flags
}

// buildShim compiles shim/godist_mpi.c into out with the C compiler ($CC,
// else cc) and mpicc's compile flags, linking no MPI library.
func buildShim(t *testing.T, mpicc, out string) {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	args := append(shimCompileFlags(t, mpicc), "-shared", "-fPIC", "-O2", "-o", out, filepath.Join("shim", "godist_mpi.c"))
	if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", cc, strings.Join(args, " "), err, b)
	}
}

// TestConfigFromEnv: the Config godist's library hands Open
// (assemble.Configure) is the environment's settings and the launcher
// whose variables are set, not empty.
func TestConfigFromEnv(t *testing.T) {
	getenv := func(env map[string]string) func(string) string {
		return func(k string) string { return env[k] }
	}
	for _, tc := range []struct {
		env  map[string]string
		want Config
	}{
		{nil, Config{}},
		{map[string]string{"GODIST_MPI": "mpich", "GODIST_MPI_SHIM": "/x/y.so", "GODIST_MPI_LIBRARY": "/l/libmpi.so",
			"OMPI_COMM_WORLD_SIZE": "2", "GODIST_NCCL_LIBRARY": "/n.so"},
			Config{MPI: "mpich", Shim: "/x/y.so", Library: "/l/libmpi.so", Launcher: "openmpi"}},
		{map[string]string{"OMPI_COMM_WORLD_RANK": "0"}, Config{Launcher: "openmpi"}},
		{map[string]string{"PMI_ID": "0"}, Config{Launcher: "mpich"}},
		{map[string]string{"MPI_LOCALNRANKS": "4"}, Config{Launcher: "mpich"}},
		{map[string]string{"PMI_RANK": "1", "OMPI_COMM_WORLD_RANK": "1"}, Config{Launcher: "openmpi"}},
		{map[string]string{"OMPI_COMM_WORLD_SIZE": "", "PMI_SIZE": ""}, Config{}}, // empty: not set
	} {
		if got := ConfigFromEnv(getenv(tc.env)); got != tc.want {
			t.Errorf("ConfigFromEnv(%v) = %+v; want %+v", tc.env, got, tc.want)
		}
	}
}

func TestChooseShim(t *testing.T) {
	check := func(what, dir string, c Config, wantPath, wantImpl string) {
		t.Helper()
		if p, impl, err := chooseShim(dir, c); err != nil || p != wantPath || impl != wantImpl {
			t.Errorf("%s: %q %q %v; want %q %q", what, p, impl, err, wantPath, wantImpl)
		}
	}
	check("MPICH's launcher", "/d", Config{Launcher: "mpich"}, "/d/"+ShimName("mpich"), "mpich")
	check("Open MPI's launcher", "/d", Config{Launcher: "openmpi"}, "/d/"+ShimName("openmpi"), "openmpi")
	check("GODIST_MPI", "/d", Config{MPI: "mpich", Launcher: "openmpi"}, "/d/"+ShimName("mpich"), "mpich")
	if _, _, err := chooseShim("/d", Config{MPI: "lam", Launcher: "openmpi"}); !errors.Is(err, ErrUnavailable) ||
		!strings.Contains(err.Error(), "GODIST_MPI") || !strings.Contains(err.Error(), "lam") {
		t.Errorf("GODIST_MPI=lam: %v", err)
	}
	// GODIST_MPI_SHIM: the implementation is GODIST_MPI's, else the file
	// name's, else the launcher's.
	check("GODIST_MPI_SHIM under Open MPI's launcher", "/d", Config{Shim: "/x/y.so", Launcher: "openmpi"},
		"/x/y.so", "openmpi")
	check("GODIST_MPI_SHIM and GODIST_MPI", "/d", Config{Shim: "/x/y.so", MPI: "mpich", Launcher: "openmpi"},
		"/x/y.so", "mpich")
	check("GODIST_MPI_SHIM alone", "/d", Config{Shim: "/x/y.so"}, "/x/y.so", "")
	check("GODIST_MPI_SHIM's name", "/d", Config{Shim: "/x/" + ShimName("mpich"), Launcher: "openmpi"},
		"/x/"+ShimName("mpich"), "mpich")
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, ShimName("mpich")), nil, 0o644)
	check("singleton", dir, Config{}, filepath.Join(dir, ShimName("mpich")), "mpich")
	// Nothing to go by: the error names the settings, the launchers'
	// variables and the paths tried.
	empty := t.TempDir()
	_, _, err := chooseShim(empty, Config{})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("no shim: %v", err)
	}
	for _, want := range append(append([]string{"GODIST_MPI_SHIM", "GODIST_MPI", filepath.Join(empty, ShimName("openmpi")),
		filepath.Join(empty, ShimName("mpich"))}, openMPIVars...), mpichVars...) {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

func TestOpenMPILibrary(t *testing.T) {
	if name, err := openMPILibrary("", Config{}); name != "" || err != nil {
		t.Errorf("unknown implementation: %q %v; want nothing tried", name, err)
	}
	// Not found: the error names every soname tried and the override.
	MPILibraries["nompi"] = []string{"libgodist-no-such-mpi.so.1", "libgodist-no-such-mpi.so.2"}
	defer delete(MPILibraries, "nompi")
	_, err := openMPILibrary("nompi", Config{})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("missing library: %v", err)
	}
	for _, want := range append(MPILibraries["nompi"], EnvLibrary) {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	missing := filepath.Join(t.TempDir(), "libmpi.so.40")
	if _, err := openMPILibrary("openmpi", Config{Library: missing}); !errors.Is(err, ErrUnavailable) ||
		!strings.Contains(err.Error(), EnvLibrary+"="+missing) {
		t.Errorf("GODIST_MPI_LIBRARY=%s: %v", missing, err)
	}
	// Found by soname (skipped where neither MPI is installed).
	for _, impl := range Impls {
		name, err := openMPILibrary(impl, Config{})
		if err != nil {
			t.Logf("%s: %v", impl, err)
			continue
		}
		if !slices.Contains(MPILibraries[impl], name) {
			t.Errorf("%s: loaded %q, not one of %v", impl, name, MPILibraries[impl])
		}
	}
}

// TestShimLinksNoMPI: a shim built as the Makefile and setup.py build it
// needs no MPI library (no DT_NEEDED entry for one) and leaves MPI's
// functions undefined, for the library Open loads first.
func TestShimLinksNoMPI(t *testing.T) {
	mpiLib := regexp.MustCompile(`^lib(mpi|mpich|open-pal|open-rte|pmix)[._]`)
	built := 0
	for _, l := range launchers {
		if _, err := exec.LookPath(l.mpicc); err != nil {
			continue
		}
		out := filepath.Join(t.TempDir(), ShimName(l.impl))
		buildShim(t, l.mpicc, out)
		built++
		f, err := elf.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		needed, err := f.ImportedLibraries()
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range needed {
			if mpiLib.MatchString(n) {
				t.Errorf("%s: NEEDED %s", l.impl, n)
			}
		}
		syms, err := f.ImportedSymbols()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(syms, func(s elf.ImportedSymbol) bool { return s.Name == "MPI_Init_thread" }) {
			t.Errorf("%s: MPI_Init_thread is not among the undefined symbols", l.impl)
		}
	}
	if built == 0 {
		t.Skip("no mpicc")
	}
}
