package mpi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Under an MPI launcher the test binary is one rank of the multi-rank
// checks (rankMain); otherwise TestLaunch builds the shims and starts this
// same binary with mpirun.
const (
	envDir  = "GODIST_MPI_TEST_DIR"  // the shims' directory
	envImpl = "GODIST_MPI_TEST_IMPL" // the implementation Open must pick
)

func TestMain(m *testing.M) {
	if os.Getenv(envDir) != "" && (os.Getenv("OMPI_COMM_WORLD_SIZE") != "" || os.Getenv("PMI_SIZE") != "") {
		os.Exit(rankMain())
	}
	os.Exit(m.Run())
}

// TestOpenUnavailable: Open goes by Configure's Config, not by the
// environment (whose settings here would have it load a shim instead).
func TestOpenUnavailable(t *testing.T) {
	t.Setenv(EnvMPI, "mpich")
	t.Setenv(EnvShim, "/nonexistent/"+ShimName("mpich"))
	t.Setenv("OMPI_COMM_WORLD_RANK", "0")
	Configure(Config{})
	dir := t.TempDir()
	lib, err := Open(dir)
	if lib != nil || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Open(empty dir) = %v, %v; want ErrUnavailable", lib, err)
	}
	for _, want := range []string{"GODIST_MPI_SHIM", "GODIST_MPI", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "MPI_LOCALNRANKS",
		filepath.Join(dir, ShimName("openmpi")), filepath.Join(dir, ShimName("mpich"))} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if _, err2 := Open(dir); err2 != err {
		t.Errorf("second Open returned %v, want the first error", err2)
	}
}

type launcher struct {
	impl, mpicc, mpirun string
	args                []string
}

var launchers = []launcher{
	{"openmpi", "mpicc.openmpi", "mpirun.openmpi", []string{"--allow-run-as-root", "--oversubscribe", "--bind-to", "none"}},
	{"mpich", "mpicc.mpich", "mpirun.mpich", nil},
}

func TestLaunch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MPI jobs")
	}
	var found []launcher
	var missing []string
	for _, l := range launchers {
		_, e1 := exec.LookPath(l.mpicc)
		_, e2 := exec.LookPath(l.mpirun)
		if e1 != nil || e2 != nil {
			missing = append(missing, l.mpicc+"/"+l.mpirun)
			continue
		}
		found = append(found, l)
	}
	if len(found) == 0 {
		t.Skipf("no MPI: %s not found", strings.Join(missing, ", "))
	}
	dir := t.TempDir()
	for _, l := range found {
		buildShim(t, l.mpicc, filepath.Join(dir, ShimName(l.impl)))
	}
	// The test binary: this one, already built (the same code `go test -c`
	// would build).
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GODIST_MPI") {
			env = append(env, kv)
		}
	}
	for _, l := range found {
		for _, n := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("%s/np%d", l.impl, n), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
				defer cancel()
				args := append(append([]string{}, l.args...), "-np", fmt.Sprint(n), bin, "-test.timeout=80s")
				cmd := exec.CommandContext(ctx, l.mpirun, args...)
				cmd.Env = append(env, envDir+"="+dir, envImpl+"="+l.impl)
				cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
				cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
				cmd.WaitDelay = 5 * time.Second
				start := time.Now()
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s %s: %v (after %v)\n%s", l.mpirun, strings.Join(args, " "), err, time.Since(start), out)
				}
				for r := 0; r < n; r++ {
					want := fmt.Sprintf("godist-mpi-test rank %d/%d ok %s", r, n, l.impl)
					if !bytes.Contains(out, []byte(want)) {
						t.Errorf("no line %q in\n%s", want, out)
					}
				}
				t.Logf("%d ranks in %v", n, time.Since(start).Round(time.Millisecond))
			})
		}
	}
}
