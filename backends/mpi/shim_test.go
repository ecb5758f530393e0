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

func clearMPIEnv(t *testing.T) {
	for _, v := range append(append([]string{"GODIST_MPI_SHIM", "GODIST_MPI", EnvLibrary}, openMPIVars...), mpichVars...) {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
}

func TestChooseShim(t *testing.T) {
	check := func(what, dir, wantPath, wantImpl string) {
		t.Helper()
		if p, impl, err := chooseShim(dir); err != nil || p != wantPath || impl != wantImpl {
			t.Errorf("%s: %q %q %v; want %q %q", what, p, impl, err, wantPath, wantImpl)
		}
	}
	clearMPIEnv(t)
	t.Setenv("PMI_ID", "0")
	check("PMI_ID", "/d", "/d/"+ShimName("mpich"), "mpich")
	t.Setenv("OMPI_COMM_WORLD_RANK", "0")
	check("OMPI_COMM_WORLD_RANK", "/d", "/d/"+ShimName("openmpi"), "openmpi")
	t.Setenv("GODIST_MPI", "mpich")
	check("GODIST_MPI", "/d", "/d/"+ShimName("mpich"), "mpich")
	t.Setenv("GODIST_MPI", "lam")
	if _, _, err := chooseShim("/d"); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "lam") {
		t.Errorf("GODIST_MPI=lam: %v", err)
	}
	// GODIST_MPI_SHIM: the implementation is GODIST_MPI's, else the file
	// name's, else the launcher's.
	t.Setenv("GODIST_MPI_SHIM", "/x/y.so")
	check("GODIST_MPI_SHIM under Open MPI's launcher", "/d", "/x/y.so", "openmpi")
	t.Setenv("GODIST_MPI", "mpich")
	check("GODIST_MPI_SHIM and GODIST_MPI", "/d", "/x/y.so", "mpich")
	clearMPIEnv(t)
	t.Setenv("GODIST_MPI_SHIM", "/x/y.so")
	check("GODIST_MPI_SHIM alone", "/d", "/x/y.so", "")
	t.Setenv("GODIST_MPI_SHIM", "/x/"+ShimName("mpich"))
	t.Setenv("OMPI_COMM_WORLD_RANK", "0")
	check("GODIST_MPI_SHIM's name", "/d", "/x/"+ShimName("mpich"), "mpich")
	clearMPIEnv(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, ShimName("mpich")), nil, 0o644)
	check("singleton", dir, filepath.Join(dir, ShimName("mpich")), "mpich")
}

func TestOpenMPILibrary(t *testing.T) {
	clearMPIEnv(t)
	if name, err := openMPILibrary(""); name != "" || err != nil {
		t.Errorf("unknown implementation: %q %v; want nothing tried", name, err)
	}
	// Not found: the error names every soname tried and the override.
	MPILibraries["nompi"] = []string{"libgodist-no-such-mpi.so.1", "libgodist-no-such-mpi.so.2"}
	defer delete(MPILibraries, "nompi")
	_, err := openMPILibrary("nompi")
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("missing library: %v", err)
	}
	for _, want := range append(MPILibraries["nompi"], EnvLibrary) {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	missing := filepath.Join(t.TempDir(), "libmpi.so.40")
	t.Setenv(EnvLibrary, missing)
	if _, err := openMPILibrary("openmpi"); !errors.Is(err, ErrUnavailable) ||
		!strings.Contains(err.Error(), EnvLibrary+"="+missing) {
		t.Errorf("GODIST_MPI_LIBRARY=%s: %v", missing, err)
	}
	// Found by soname (skipped where neither MPI is installed).
	clearMPIEnv(t)
	for _, impl := range Impls {
		name, err := openMPILibrary(impl)
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
