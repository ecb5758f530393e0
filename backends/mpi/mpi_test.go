package mpi

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godist/godist/libgodist/reduce"
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

func TestOpenUnavailable(t *testing.T) {
	for _, v := range append(append([]string{"GODIST_MPI_SHIM", "GODIST_MPI"}, openMPIVars...), mpichVars...) {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
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

// ---- one rank

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

const nElems = 37

var dtypes = []reduce.DType{reduce.Float16, reduce.BFloat16, reduce.Float32, reduce.Float64, reduce.Complex64,
	reduce.Complex128, reduce.Int8, reduce.Uint8, reduce.Int16, reduce.Int32, reduce.Int64, reduce.Bool}

var ops = []reduce.Op{reduce.Sum, reduce.Product, reduce.Min, reduce.Max, reduce.BAnd, reduce.BOr, reduce.BXor}

// halfIdentity is the element that leaves every float16/bfloat16 value
// unchanged under op (bit for bit, after the first rounding), so ranks >= 2
// contribute it and the result does not depend on MPI's reduction order.
func halfIdentity(dt reduce.DType, op reduce.Op) uint16 {
	bf := dt == reduce.BFloat16
	switch op {
	case reduce.Sum:
		return 0x8000
	case reduce.Product:
		if bf {
			return 0x3f80
		}
		return 0x3c00
	case reduce.Min:
		if bf {
			return 0x7f80
		}
		return 0x7c00
	default: // Max
		if bf {
			return 0xff80
		}
		return 0xfc00
	}
}

// input is rank's deterministic input for dt and op: values whose
// reduction is exact (so independent of MPI's order) for float32/64 and
// complex; any bits for integers; 0/1 for bool; random bits (NaNs,
// infinities, subnormals included) on ranks 0 and 1 and the identity on the
// others for float16/bfloat16.
func input(rank int, dt reduce.DType, op reduce.Op, n int) []byte {
	b := make([]byte, n*dt.Size())
	seed := uint64(rank+1)*0x9e3779b97f4a7c15 + uint64(dt)*1000003 + uint64(op)*7919
	next := func() uint64 {
		seed ^= seed << 13
		seed ^= seed >> 7
		seed ^= seed << 17
		return seed
	}
	small := func(i, k int) float64 { return float64((i*7+rank*3+k*5)%9 - 4) }
	for i := 0; i < n; i++ {
		switch dt {
		case reduce.Float16, reduce.BFloat16:
			v := uint16(next())
			if rank >= 2 {
				v = halfIdentity(dt, op)
			}
			binary.LittleEndian.PutUint16(b[2*i:], v)
		case reduce.Float32:
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(small(i, 0))))
		case reduce.Float64:
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(small(i, 0)))
		case reduce.Complex64:
			binary.LittleEndian.PutUint32(b[8*i:], math.Float32bits(float32(small(i, 0))))
			binary.LittleEndian.PutUint32(b[8*i+4:], math.Float32bits(float32(small(i, 1))))
		case reduce.Complex128:
			binary.LittleEndian.PutUint64(b[16*i:], math.Float64bits(small(i, 0)))
			binary.LittleEndian.PutUint64(b[16*i+8:], math.Float64bits(small(i, 1)))
		case reduce.Bool:
			if (i+rank)%3 == 0 || next()%2 == 0 {
				b[i] = 1
			}
		default:
			for k := 0; k < dt.Size(); k++ {
				b[i*dt.Size()+k] = byte(next())
			}
		}
	}
	return b
}

// reference is the reduction of every rank's input by libgodist/reduce.
func reference(n int, dt reduce.DType, op reduce.Op, count int) ([]byte, error) {
	ref := input(0, dt, op, count)
	for r := 1; r < n; r++ {
		if err := reduce.Combine(op, dt, ref, input(r, dt, op, count)); err != nil {
			return nil, err
		}
	}
	return ref, nil
}

// mpiSupports says whether the shim reduces dt with op.
func mpiSupports(dt reduce.DType, op reduce.Op) bool {
	return reduce.Check(op, dt) == nil
}

func isArgError(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == ErrArg
}

func (r *rankT) allreduce() error {
	for _, dt := range dtypes {
		for _, op := range ops {
			buf, free := cbuf(input(r.rank, dt, op, nElems))
			req, err := r.l.Iallreduce(World, buf, nElems, dt, op)
			if !mpiSupports(dt, op) {
				if !isArgError(err) {
					r.fail("Iallreduce %s %s: got %v, want GM_ERR_ARG", dt, op, err)
				}
				free()
				continue
			}
			if err != nil {
				free()
				return fmt.Errorf("Iallreduce %s %s: %w", dt, op, err)
			}
			if _, _, err := r.wait(req); err != nil {
				free()
				return fmt.Errorf("Iallreduce %s %s: %w", dt, op, err)
			}
			ref, err := reference(r.n, dt, op, nElems)
			if err != nil {
				return err
			}
			if !bytes.Equal(buf, ref) {
				r.fail("Iallreduce %s %s: got %x, want %x", dt, op, buf, ref)
			}
			free()
		}
	}
	return nil
}

func (r *rankT) reduceRoot() error {
	root := r.n - 1
	for _, dt := range []reduce.DType{reduce.Float32, reduce.BFloat16, reduce.Int64} {
		in := input(r.rank, dt, reduce.Sum, nElems)
		buf, free := cbuf(in)
		defer free()
		req, err := r.l.Ireduce(World, buf, nElems, dt, reduce.Sum, root)
		if err != nil {
			return fmt.Errorf("Ireduce %s: %w", dt, err)
		}
		if _, _, err := r.wait(req); err != nil {
			return fmt.Errorf("Ireduce %s: %w", dt, err)
		}
		want := in
		if r.rank == root {
			if want, err = reference(r.n, dt, reduce.Sum, nElems); err != nil {
				return err
			}
		}
		if !bytes.Equal(buf, want) {
			r.fail("Ireduce %s root %d: got %x, want %x", dt, root, buf, want)
		}
	}
	return nil
}

func (r *rankT) reduceScatter() error {
	const count = 5
	dt := reduce.Int32
	in, freeIn := cbuf(input(r.rank, dt, reduce.Sum, count*r.n))
	defer freeIn()
	out, freeOut := Alloc(count * 4)
	defer freeOut()
	req, err := r.l.IreduceScatterBlock(World, in, out, count, dt, reduce.Sum)
	if err != nil {
		return fmt.Errorf("IreduceScatterBlock: %w", err)
	}
	if _, _, err := r.wait(req); err != nil {
		return fmt.Errorf("IreduceScatterBlock: %w", err)
	}
	ref, err := reference(r.n, dt, reduce.Sum, count*r.n)
	if err != nil {
		return err
	}
	if want := ref[r.rank*count*4 : (r.rank+1)*count*4]; !bytes.Equal(out, want) {
		r.fail("IreduceScatterBlock: got %x, want %x", out, want)
	}
	return nil
}

func pattern(n, salt int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + salt*31 + 1)
	}
	return b
}

func (r *rankT) bcast() error {
	root := r.n / 2
	want := pattern(1000, root)
	buf, free := Alloc(len(want))
	defer free()
	if r.rank == root {
		copy(buf, want)
	}
	req, err := r.l.Ibcast(World, buf, root)
	if err != nil {
		return fmt.Errorf("Ibcast: %w", err)
	}
	if _, _, err := r.wait(req); err != nil {
		return fmt.Errorf("Ibcast: %w", err)
	}
	if !bytes.Equal(buf, want) {
		r.fail("Ibcast: wrong bytes")
	}
	// Blocking Bcast on Go memory.
	g := make([]byte, 16)
	if r.rank == 0 {
		copy(g, "rendezvous:1234")
	}
	if err := r.l.Bcast(World, g, 0); err != nil {
		return fmt.Errorf("Bcast: %w", err)
	}
	if string(g[:15]) != "rendezvous:1234" {
		r.fail("Bcast: got %q", g)
	}
	return nil
}

func (r *rankT) allgather() error {
	const n = 7
	in, freeIn := cbuf(pattern(n, r.rank))
	defer freeIn()
	out, freeOut := Alloc(n * r.n)
	defer freeOut()
	req, err := r.l.Iallgather(World, in, out)
	if err != nil {
		return fmt.Errorf("Iallgather: %w", err)
	}
	if _, _, err := r.wait(req); err != nil {
		return fmt.Errorf("Iallgather: %w", err)
	}
	for s := 0; s < r.n; s++ {
		if !bytes.Equal(out[s*n:(s+1)*n], pattern(n, s)) {
			r.fail("Iallgather: block %d wrong", s)
		}
	}
	return nil
}

// a2aCount is how many bytes rank from sends to rank to (0 included).
func a2aCount(from, to int) int64 { return int64((from + 2*to) % 4) }

func (r *rankT) alltoallv() error {
	n := r.n
	scounts, sdispls := make([]int64, n), make([]int64, n)
	rcounts, rdispls := make([]int64, n), make([]int64, n)
	var stotal, rtotal int64
	for s := 0; s < n; s++ {
		scounts[s], sdispls[s] = a2aCount(r.rank, s), stotal+1 // a gap byte before each block
		stotal += scounts[s] + 1
		rcounts[s], rdispls[s] = a2aCount(s, r.rank), rtotal
		rtotal += rcounts[s]
	}
	in, freeIn := Alloc(int(stotal))
	defer freeIn()
	for s := 0; s < n; s++ {
		for k := int64(0); k < scounts[s]; k++ {
			in[sdispls[s]+k] = byte(r.rank*16 + s + int(k)*64)
		}
	}
	out, freeOut := Alloc(int(rtotal) + 1)
	defer freeOut()
	req, err := r.l.Ialltoallv(World, in, scounts, sdispls, out, rcounts, rdispls)
	if err != nil {
		return fmt.Errorf("Ialltoallv: %w", err)
	}
	if _, _, err := r.wait(req); err != nil {
		return fmt.Errorf("Ialltoallv: %w", err)
	}
	for s := 0; s < n; s++ {
		for k := int64(0); k < rcounts[s]; k++ {
			if got, want := out[rdispls[s]+k], byte(s*16+r.rank+int(k)*64); got != want {
				r.fail("Ialltoallv: from %d byte %d = %d, want %d", s, k, got, want)
			}
		}
	}
	return nil
}

func (r *rankT) gatherScatter() error {
	n := r.n
	root := 1 % n
	counts, displs := make([]int64, n), make([]int64, n)
	var total int64
	for s := 0; s < n; s++ {
		counts[s], displs[s] = int64(s+1), total
		total += counts[s]
	}
	in, freeIn := cbuf(bytes.Repeat([]byte{byte(r.rank + 1)}, r.rank+1))
	defer freeIn()
	var out []byte
	if r.rank == root {
		var free func()
		out, free = Alloc(int(total))
		defer free()
	}
	req, err := r.l.Igatherv(World, in, out, counts, displs, root)
	if err != nil {
		return fmt.Errorf("Igatherv: %w", err)
	}
	if _, _, err := r.wait(req); err != nil {
		return fmt.Errorf("Igatherv: %w", err)
	}
	if r.rank == root {
		for s := 0; s < n; s++ {
			if want := bytes.Repeat([]byte{byte(s + 1)}, s+1); !bytes.Equal(out[displs[s]:displs[s]+counts[s]], want) {
				r.fail("Igatherv: block %d = %x, want %x", s, out[displs[s]:displs[s]+counts[s]], want)
			}
		}
	}

	// Iscatterv from rank 0: block s is s+2 bytes of pattern(s).
	var src []byte
	scounts, sdispls := make([]int64, n), make([]int64, n)
	total = 0
	for s := 0; s < n; s++ {
		scounts[s], sdispls[s] = int64(s+2), total
		total += scounts[s]
	}
	if r.rank == 0 {
		var free func()
		src, free = Alloc(int(total))
		defer free()
		for s := 0; s < n; s++ {
			copy(src[sdispls[s]:], pattern(s+2, s))
		}
	}
	dst, freeDst := Alloc(r.rank + 2)
	defer freeDst()
	req, err = r.l.Iscatterv(World, src, scounts, sdispls, dst, 0)
	if err != nil {
		return fmt.Errorf("Iscatterv: %w", err)
	}
	if _, _, err := r.wait(req); err != nil {
		return fmt.Errorf("Iscatterv: %w", err)
	}
	if !bytes.Equal(dst, pattern(r.rank+2, r.rank)) {
		r.fail("Iscatterv: got %x", dst)
	}
	return nil
}

func (r *rankT) barrier() error {
	req, err := r.l.Ibarrier(World)
	if err != nil {
		return fmt.Errorf("Ibarrier: %w", err)
	}
	_, _, err = r.wait(req)
	return err
}

func (r *rankT) p2p() error {
	n := r.n
	next, prev := (r.rank+1)%n, (r.rank+n-1)%n
	// Any-source receive with tag 7, a specific-source receive with tag 9.
	rbuf, freeR := Alloc(64)
	defer freeR()
	rbuf9, freeR9 := Alloc(64)
	defer freeR9()
	recv9, err := r.l.Irecv(World, rbuf9, prev, 9)
	if err != nil {
		return fmt.Errorf("Irecv: %w", err)
	}
	recv, err := r.l.Irecv(World, rbuf, -1, 7)
	if err != nil {
		return fmt.Errorf("Irecv: %w", err)
	}
	s7, free7 := cbuf(pattern(10+r.rank, r.rank))
	defer free7()
	s9, free9 := cbuf(pattern(3, 100+r.rank))
	defer free9()
	send9, err := r.l.Isend(World, s9, next, 9)
	if err != nil {
		return fmt.Errorf("Isend: %w", err)
	}
	send7, err := r.l.Isend(World, s7, next, 7)
	if err != nil {
		return fmt.Errorf("Isend: %w", err)
	}
	src, nb, err := r.wait(recv)
	if err != nil {
		return fmt.Errorf("Irecv any source: %w", err)
	}
	if src != prev || nb != int64(10+prev) || !bytes.Equal(rbuf[:nb], pattern(10+prev, prev)) {
		r.fail("Irecv any source: source %d, %d bytes, want %d, %d", src, nb, prev, 10+prev)
	}
	src, nb, err = r.wait(recv9)
	if err != nil {
		return fmt.Errorf("Irecv tag 9: %w", err)
	}
	if src != prev || nb != 3 || !bytes.Equal(rbuf9[:3], pattern(3, 100+prev)) {
		r.fail("Irecv tag 9: source %d, %d bytes", src, nb)
	}
	for _, q := range []Request{send7, send9} {
		if _, _, err := r.wait(q); err != nil {
			return fmt.Errorf("Isend: %w", err)
		}
	}
	// A receive nobody matches, abandoned (cancelled).
	lost, err := r.l.Irecv(World, rbuf, -1, 12345)
	if err != nil {
		return fmt.Errorf("Irecv: %w", err)
	}
	if err := r.l.Abandon(lost); err != nil {
		r.fail("Abandon: %v", err)
	}
	if _, _, _, err := r.l.Test(lost); !isArgError(err) {
		r.fail("Test of an abandoned request: %v, want GM_ERR_ARG", err)
	}
	return nil
}

func (r *rankT) subComm() error {
	if r.n < 3 {
		return nil
	}
	if r.rank != 0 && r.rank != 2 {
		if _, err := r.l.CommCreate([]int{0, 2}, 5); !isArgError(err) {
			r.fail("CommCreate without this rank: %v, want GM_ERR_ARG", err)
		}
		return nil
	}
	c, err := r.l.CommCreate([]int{0, 2}, 5)
	if err != nil {
		return fmt.Errorf("CommCreate: %w", err)
	}
	buf, free := Alloc(4)
	defer free()
	binary.LittleEndian.PutUint32(buf, uint32(r.rank+1))
	req, err := r.l.Iallreduce(c, buf, 1, reduce.Int32, reduce.Sum)
	if err != nil {
		return fmt.Errorf("Iallreduce on the sub-communicator: %w", err)
	}
	if _, _, err := r.wait(req); err != nil {
		return err
	}
	if v := binary.LittleEndian.Uint32(buf); v != 4 {
		r.fail("Iallreduce on {0, 2}: %d, want 4", v)
	}
	// Ranks of the sub-communicator: world 2 is rank 1 there.
	g := make([]byte, 4)
	if r.rank == 2 {
		copy(g, "sub!")
	}
	if err := r.l.Bcast(c, g, 1); err != nil || string(g) != "sub!" {
		r.fail("Bcast on {0, 2} from its rank 1: %q %v", g, err)
	}
	return nil
}

var errText = regexp.MustCompile(`^MPI_Iallreduce: MPI error 100001 \(GM_ERR_ARG`)

func (r *rankT) unsupported() error {
	buf, free := Alloc(16)
	defer free()
	_, err := r.l.Iallreduce(World, buf, 4, reduce.Float32, reduce.BAnd)
	var e *Error
	if !errors.As(err, &e) || e.Code != ErrArg || !errText.MatchString(e.Error()) {
		r.fail("BAND on float32: %v, want an *Error with GM_ERR_ARG", err)
	}
	if _, err := r.l.Iallreduce(World, buf, 1<<40, reduce.Float32, reduce.Sum); !isArgError(err) {
		r.fail("count 2^40: %v, want GM_ERR_ARG", err)
	}
	return nil
}
