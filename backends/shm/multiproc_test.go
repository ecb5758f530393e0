package shm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/godist/godist/internal/testutil"
	"github.com/godist/godist/libgodist/reduce"
	"github.com/godist/godist/libgodist/transport"
)

// Real processes: the test binary re-executes itself with GODIST_SHM_CHILD
// set to a mode; TestMain runs the child instead of the tests.

const (
	envChild = "GODIST_SHM_CHILD"
	envName  = "GODIST_SHM_NAME"
	envRank  = "GODIST_SHM_RANK"
	envSize  = "GODIST_SHM_SIZE"
	envOut   = "GODIST_SHM_OUT"
	envCrash = "GODIST_SHM_CRASH_RANK"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envChild); mode != "" {
		os.Exit(childMain(mode))
	}
	os.Exit(m.Run())
}

// childResult is what a child reports through its output file.
type childResult struct {
	Results [][]byte // allreduce mode: the reduced buffers
	Err     string   // the error that ended the child, if any
	Class   string   // "connlost", "peergone", "timeout" or "" for Err
	Peer    int      // the PeerError's peer
	Elapsed time.Duration
	Bench   []benchRow // bench mode
}

// mpSizes are the all-reduce sizes (float32 elements) of the
// cross-process test: inline, one-shot, two-shot and many chunks.
var mpSizes = []int{1, 60, 3000, 70_000, 1_000_003}

func childMain(mode string) int {
	rank, _ := strconv.Atoi(os.Getenv(envRank))
	size, _ := strconv.Atoi(os.Getenv(envSize))
	var res childResult
	err := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cfg := Config{Name: os.Getenv(envName), Rank: rank, Size: size, ChunkSize: 64 << 10}
		if mode == "bench" {
			// Defaults, unless the benchmark is told otherwise.
			cfg.ChunkSize, _ = strconv.Atoi(os.Getenv("GODIST_SHM_CHUNK"))
			cfg.OneShotMax, _ = strconv.Atoi(os.Getenv("GODIST_SHM_ONESHOT"))
			cfg.DirectMin, _ = strconv.Atoi(os.Getenv("GODIST_SHM_DIRECT"))
		}
		a, err := Open(ctx, cfg)
		if err != nil {
			return err
		}
		defer a.Close()
		d := dtypeCase{reduce.Float32, reduce.Sum}
		switch mode {
		case "allreduce":
			for _, n := range mpSizes {
				buf := fill(d.dt, n, uint64(rank*1000+n))
				if err := a.AllReduce(ctx, buf, 4, d.combine); err != nil {
					return err
				}
				res.Results = append(res.Results, buf)
			}
			return a.Barrier(ctx)
		case "crash":
			crash, _ := strconv.Atoi(os.Getenv(envCrash))
			buf := fill(d.dt, 1000, 1)
			if err := a.AllReduce(ctx, buf, 4, d.combine); err != nil {
				return err
			}
			if rank == crash {
				// Die without closing once the others wait for this rank
				// in the next all-reduce.
				if !testutil.WaitUntil(20*time.Second, func() bool { return asleep(a) >= size-1 }) {
					return fmt.Errorf("the other ranks never waited: %d asleep", asleep(a))
				}
				os.Exit(3)
			}
			start := time.Now()
			err := a.AllReduce(ctx, buf, 4, d.combine)
			res.Elapsed = time.Since(start)
			return err
		case "bench":
			if prof := os.Getenv("GODIST_SHM_CPUPROFILE"); prof != "" {
				f, err := os.Create(fmt.Sprintf("%s.%d", prof, rank))
				if err == nil {
					_ = pprof.StartCPUProfile(f)
					defer func() { pprof.StopCPUProfile(); f.Close() }()
				}
			}
			rows, err := procBench(ctx, a)
			res.Bench = rows
			return err
		}
		return fmt.Errorf("unknown child mode %q", mode)
	}()
	if err != nil {
		res.Err = err.Error()
		var pe *transport.PeerError
		if errors.As(err, &pe) {
			res.Peer = pe.Peer
		}
		switch {
		case errors.Is(err, transport.ErrConnLost):
			res.Class = "connlost"
		case errors.Is(err, transport.ErrPeerGone):
			res.Class = "peergone"
		case errors.Is(err, transport.ErrTimeout):
			res.Class = "timeout"
		}
	}
	b, _ := json.Marshal(res)
	if werr := os.WriteFile(os.Getenv(envOut), b, 0o600); werr != nil {
		fmt.Fprintln(os.Stderr, werr)
		return 2
	}
	return 0
}

// runChildren starts size children in mode and returns their results and
// exit errors by rank.
func runChildren(t *testing.T, mode string, size int, extraEnv ...string) ([]childResult, []error) {
	t.Helper()
	dir := t.TempDir()
	name := uniqueName()
	cmds := make([]*exec.Cmd, size)
	for r := range cmds {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envChild+"="+mode, envName+"="+name, envRank+"="+strconv.Itoa(r),
			envSize+"="+strconv.Itoa(size), envOut+"="+filepath.Join(dir, strconv.Itoa(r)))
		cmd.Env = append(cmd.Env, extraEnv...)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		cmds[r] = cmd
	}
	exits := make([]error, size)
	var wg sync.WaitGroup
	for r, cmd := range cmds {
		wg.Add(1)
		go func() { defer wg.Done(); exits[r] = cmd.Wait() }()
	}
	wg.Wait()
	results := make([]childResult, size)
	for r := range results {
		b, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(r)))
		if err != nil {
			continue // a crashed child writes nothing
		}
		require.NoError(t, json.Unmarshal(b, &results[r]))
	}
	_, err := os.Stat(filepath.Join(DefaultDir, name))
	require.True(t, errors.Is(err, os.ErrNotExist), "arena file left behind")
	return results, exits
}

// TestMultiProcessAllReduce: separate processes all-reduce through one
// arena and end with bitwise identical results equal to the rank-order
// reference.
func TestMultiProcessAllReduce(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	d := dtypeCase{reduce.Float32, reduce.Sum}
	for _, size := range []int{2, 3} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			results, exits := runChildren(t, "allreduce", size)
			for r := range results {
				require.NoError(t, exits[r], "child %d", r)
				require.Empty(t, results[r].Err, "child %d", r)
				require.Len(t, results[r].Results, len(mpSizes))
			}
			for i, n := range mpSizes {
				ins := make([][]byte, size)
				for r := range ins {
					ins[r] = fill(d.dt, n, uint64(r*1000+n))
				}
				want := refReduce(t, d, ins)
				for r := range results {
					require.True(t, bytesEqual(want, results[r].Results[i]), "n=%d child %d", n, r)
				}
			}
		})
	}
}

// TestMultiProcessCrash: a child dies without closing while the others
// wait for it; they fail with ErrConnLost naming it, long before their
// 60-second deadline.
func TestMultiProcessCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	const size, crash = 3, 2
	results, exits := runChildren(t, "crash", size, envCrash+"="+strconv.Itoa(crash))
	var ee *exec.ExitError
	require.ErrorAs(t, exits[crash], &ee, "child %d did not crash: %s", crash, results[crash].Err)
	require.Equal(t, 3, ee.ExitCode())
	for r := range results {
		if r == crash {
			continue
		}
		require.NoError(t, exits[r])
		require.Equal(t, "connlost", results[r].Class, "child %d: %s", r, results[r].Err)
		require.Equal(t, crash, results[r].Peer, "child %d: %s", r, results[r].Err)
		require.Less(t, results[r].Elapsed, 5*time.Second)
	}
}
