package shm

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// skipWithoutCMA skips a test that needs single copy where this process
// may not read even its own memory with process_vm_readv (a seccomp filter).
func skipWithoutCMA(t *testing.T) {
	t.Helper()
	var b [8]byte
	if _, err := readProcess(os.Getpid(), uintptr(unsafe.Pointer(&probeWord)), b[:]); err != nil {
		t.Skipf("process_vm_readv refused: %v", err)
	}
}

// directConfig makes every collective of more than 2 KiB go by single copy.
func directConfig(c *Config) {
	c.ChunkSize = testChunk
	c.OneShotMax = 256
	c.DirectMin = 2 * testChunk
}

// TestDirectProbe: ranks that can read each other's memory agree on single
// copy at Open; a rank that cannot makes every rank use the slots, and the
// collectives give the same results either way.
func TestDirectProbe(t *testing.T) {
	if sysProcessVMReadv == 0 {
		t.Skip("no process_vm_readv on this platform")
	}
	run := func(t *testing.T, arenas []*Arena) {
		checkAllToAll(t, testCtx(t, 20*time.Second), arenas, func(r, q int) int { return 3000 + 100*q }, "alltoall")
	}
	t.Run("readable", func(t *testing.T) {
		skipWithoutCMA(t)
		arenas := openGroup(t, 3, directConfig)
		for r, a := range arenas {
			require.True(t, a.Direct(), "rank %d", r)
			require.Equal(t, 2*testChunk, a.DirectMin())
		}
		run(t, arenas)
	})
	t.Run("refused", func(t *testing.T) {
		readMemory = func(int, uintptr, []byte) (int, error) { return 0, syscall.EPERM }
		t.Cleanup(func() { readMemory = readProcess })
		arenas := openGroup(t, 3, directConfig)
		for r, a := range arenas {
			require.False(t, a.Direct(), "rank %d", r)
		}
		run(t, arenas)
	})
	t.Run("disabled", func(t *testing.T) {
		arenas := openGroup(t, 2, func(c *Config) { directConfig(c); c.DirectMin = -1 })
		require.Equal(t, -1, arenas[1].DirectMin())
		run(t, arenas)
	})
}

// TestDirectReadFails: a rank whose peer's process memory cannot be read in
// the middle of a single-copy collective fails with ErrConnLost naming the
// peer, instead of hanging or reading garbage.
func TestDirectReadFails(t *testing.T) {
	if sysProcessVMReadv == 0 {
		t.Skip("no process_vm_readv on this platform")
	}
	skipWithoutCMA(t)
	arenas := openGroup(t, 2, directConfig)
	readMemory = func(int, uintptr, []byte) (int, error) { return 0, syscall.ESRCH }
	t.Cleanup(func() { readMemory = readProcess })
	ctx := testCtx(t, 10*time.Second)
	errs := onAll(arenas, func(r int, a *Arena) error {
		return a.AllToAll(ctx, [][]byte{make([]byte, 4096), make([]byte, 4096)}, [][]byte{make([]byte, 4096), make([]byte, 4096)})
	})
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		require.Contains(t, fmt.Sprint(err), "local rank", "rank %d", r)
	}
}
