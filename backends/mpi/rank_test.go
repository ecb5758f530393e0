package mpi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// rankT is one rank of the multi-rank checks: under mpirun, TestMain runs
// rankMain instead of the tests, and each step of run calls the Lib's MPI
// functions and records what went wrong (fail) instead of stopping.
type rankT struct {
	l       *Lib
	rank, n int
	errs    []string
}

func (r *rankT) fail(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func rankMain() int {
	r := &rankT{}
	err := r.run()
	if err != nil {
		r.fail("%v", err)
	}
	if len(r.errs) > 0 {
		for _, e := range r.errs {
			fmt.Fprintf(os.Stderr, "rank %d: FAIL: %s\n", r.rank, e)
		}
		return 1
	}
	fmt.Printf("godist-mpi-test rank %d/%d ok %s\n", r.rank, r.n, r.l.Impl)
	return 0
}

func (r *rankT) wait(req Request) (int, int64, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		done, src, nb, err := r.l.Test(req)
		if done || err != nil {
			return src, nb, err
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("request %d not done after 60 s", req)
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// cbuf copies b into C memory (for non-blocking calls).
func cbuf(b []byte) ([]byte, func()) {
	c, free := Alloc(len(b))
	copy(c, b)
	return c, free
}

func (r *rankT) run() error {
	// What godist's library does when it loads (assemble.Configure): the
	// launcher's variables choose the shim.
	Configure(ConfigFromEnv(os.Getenv))
	l, err := Open(os.Getenv(envDir))
	if err != nil {
		return err
	}
	r.l, r.rank, r.n = l, l.WorldRank, l.WorldSize
	if want := os.Getenv(envImpl); l.Impl != want || filepath.Base(l.Shim) != ShimName(want) {
		r.fail("Open picked %s (%s), want %s", l.Impl, l.Shim, want)
	}
	if l.Provided != 3 || l.ProvidedName != "MPI_THREAD_MULTIPLE" || !l.InitializedByGodist {
		r.fail("provided %d %s, initialised by godist %v", l.Provided, l.ProvidedName, l.InitializedByGodist)
	}
	if l.Version == "" || strings.Contains(l.Version, "\n") || l.TagUB < 32767 || l.ProcessorName == "" {
		r.fail("version %q tag_ub %d processor %q", l.Version, l.TagUB, l.ProcessorName)
	}
	if l2, err := Open("/nonexistent"); l2 != l || err != nil {
		r.fail("second Open: %v %v", l2, err)
	}
	steps := []func() error{r.allreduce, r.reduceRoot, r.reduceScatter, r.bcast, r.allgather, r.alltoallv,
		r.gatherScatter, r.barrier, r.p2p, r.subComm, r.unsupported}
	for _, s := range steps {
		if err := s(); err != nil {
			r.fail("%v", err)
		}
	}
	if err := l.Finalize(); err != nil {
		r.fail("Finalize: %v", err)
	}
	if err := l.Finalize(); err != nil {
		r.fail("second Finalize: %v", err)
	}
	if _, err := l.Ibarrier(World); err == nil {
		r.fail("Ibarrier after Finalize succeeded")
	}
	return nil
}

func isArgError(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == ErrArg
}
