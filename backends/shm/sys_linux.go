//go:build linux

package shm

import (
	"errors"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

const (
	futexWaitOp  = 0 // FUTEX_WAIT, not private: the word is shared between processes
	futexWakeOp  = 1 // FUTEX_WAKE
	sysPidfdOpen = 434
	pollIn       = 0x1
)

const supported = true

// futexWait sleeps while *addr == val, for at most d (or until woken).
func futexWait(addr *uint32, val uint32, d time.Duration) {
	if d <= 0 {
		return
	}
	ts := syscall.NsecToTimespec(d.Nanoseconds())
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes every sleeper on addr, in any process.
func futexWake(addr *uint32) {
	syscall.RawSyscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakeOp, math.MaxInt32, 0, 0, 0)
}

// sysGetcpu is getcpu(2)'s number on this architecture (0: unknown).
var sysGetcpu = map[string]uintptr{"amd64": 309, "arm64": 168, "riscv64": 168, "loong64": 168,
	"ppc64le": 302, "s390x": 311, "386": 318}[runtime.GOARCH]

// currentCPU is the CPU the calling thread runs on.
func currentCPU() (int, bool) {
	if sysGetcpu == 0 {
		return 0, false
	}
	var cpu uint32
	_, _, e := syscall.RawSyscall(sysGetcpu, uintptr(unsafe.Pointer(&cpu)), 0, 0)
	return int(cpu), e == 0
}

// getAffinity reads the calling thread's CPU affinity.
func getAffinity(m *cpuMask) bool {
	_, _, e := syscall.RawSyscall(syscall.SYS_SCHED_GETAFFINITY, 0, unsafe.Sizeof(*m), uintptr(unsafe.Pointer(m)))
	return e == 0
}

// setAffinity sets the calling thread's CPU affinity; the kernel moves the
// thread at once if it runs on a CPU outside m.
func setAffinity(m *cpuMask) bool {
	_, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, unsafe.Sizeof(*m), uintptr(unsafe.Pointer(m)))
	return e == 0
}

// schedYield gives the CPU to another runnable thread, if any.
func schedYield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

// openPidfd returns a pidfd for pid, or -1 when the kernel has none
// (before Linux 5.3) or it is not permitted.
func openPidfd(pid int) int {
	fd, _, e := syscall.RawSyscall(sysPidfdOpen, uintptr(pid), 0, 0)
	if e != 0 {
		return -1
	}
	return int(fd) // pidfd_open sets close-on-exec
}

func closeFD(fd int) { _ = syscall.Close(fd) }

type pollFd struct {
	fd      int32
	events  int16
	revents int16
}

// exited reports whether the process pid (with pidfd, or -1) has ended. A
// pidfd also sees a zombie as ended; kill(pid, 0) does not.
func exited(pid, pidfd int) bool {
	if pidfd >= 0 {
		fds := pollFd{fd: int32(pidfd), events: pollIn}
		var ts syscall.Timespec
		n, _, e := syscall.RawSyscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&fds)), 1,
			uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		return e == 0 && n == 1 && fds.revents != 0
	}
	return syscall.Kill(pid, 0) == syscall.ESRCH
}

// sysProcessVMReadv is process_vm_readv's number on this architecture (0:
// unknown, single-copy transfers are then never attempted).
var sysProcessVMReadv = map[string]uintptr{"amd64": 310, "arm64": 270, "riscv64": 270, "loong64": 270,
	"ppc64le": 351, "s390x": 340, "386": 347}[runtime.GOARCH]

// readProcess copies len(p) bytes (or fewer) at address addr of process
// pid into p and returns how many it copied.
func readProcess(pid int, addr uintptr, p []byte) (int, error) {
	return processVM(sysProcessVMReadv, pid, addr, p)
}

// sysProcessVMWritev is process_vm_writev's number on this architecture
// (0: unknown; a sender then never writes into its receiver's memory).
var sysProcessVMWritev = map[string]uintptr{"amd64": 311, "arm64": 271, "riscv64": 271, "loong64": 271,
	"ppc64le": 352, "s390x": 341, "386": 348}[runtime.GOARCH]

// writeProcess copies p (or a first part of it) to address addr of process
// pid and returns how many bytes it copied.
func writeProcess(pid int, addr uintptr, p []byte) (int, error) {
	return processVM(sysProcessVMWritev, pid, addr, p)
}

// processVM is process_vm_readv or process_vm_writev (sysno) between p and
// len(p) bytes at address addr of process pid.
func processVM(sysno uintptr, pid int, addr uintptr, p []byte) (int, error) {
	if sysno == 0 {
		return 0, syscall.ENOSYS
	}
	if len(p) == 0 {
		return 0, nil
	}
	local := syscall.Iovec{Base: &p[0]}
	local.SetLen(len(p))
	remote := struct{ base, n uintptr }{addr, uintptr(len(p))}
	n, _, e := syscall.Syscall6(sysno, uintptr(pid), uintptr(unsafe.Pointer(&local)), 1,
		uintptr(unsafe.Pointer(&remote)), 1, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// pidNamespace returns the inode of this process's pid namespace, or 0.
func pidNamespace() uint64 {
	s, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return 0
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "pid:["), "]")
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

// createFile creates path exclusively with total bytes reserved (so a full
// /dev/shm fails here, not with SIGBUS on first touch) and maps it. The
// file has its size only once the bytes are reserved. A failure removes
// the file, or with mark leaves it at failedSize.
func createFile(path string, total int, mark bool) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, &os.PathError{Op: "create", Path: path, Err: err}
	}
	defer closeFD(fd)
	fail := func(op string, err error) ([]byte, error) {
		if !mark || syscall.Ftruncate(fd, failedSize) != nil {
			_ = syscall.Unlink(path)
		}
		return nil, &os.PathError{Op: op, Path: path, Err: err}
	}
	if err := syscall.Fallocate(fd, 0, 0, int64(total)); err != nil {
		if !errors.Is(err, syscall.EOPNOTSUPP) {
			return fail("allocate", err)
		}
		if err := syscall.Ftruncate(fd, int64(total)); err != nil {
			return fail("truncate", err)
		}
	}
	mem, err := syscall.Mmap(fd, 0, total, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return fail("mmap", err)
	}
	return mem, nil
}

// openFile opens an existing arena file; it returns fs.ErrNotExist (in an
// *os.PathError) while the file is not there.
func openFile(path string) (int, error) {
	fd, err := syscall.Open(path, syscall.O_RDWR|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, nil
}

// fileSize returns the size of the open file fd.
func fileSize(fd int) (int64, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return 0, err
	}
	return st.Size, nil
}

func mapFD(fd, n int) ([]byte, error) {
	return syscall.Mmap(fd, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
}

func unmap(mem []byte) error { return syscall.Munmap(mem) }

func unlink(path string) error { return syscall.Unlink(path) }

// removeFailed removes path if it is a file a failed creation left at
// failedSize (createFile), and nothing else.
func removeFailed(path string) {
	var st syscall.Stat_t
	if syscall.Lstat(path, &st) == nil && st.Size == failedSize && st.Mode&syscall.S_IFMT == syscall.S_IFREG {
		_ = syscall.Unlink(path)
	}
}

// dgramSocket opens an unbound, non-blocking Unix datagram socket.
func dgramSocket() (int, error) {
	return syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
}

// sendDatagram sends one byte from fd to the abstract Unix address addr.
// A full queue at the receiver is not an error (it is being woken).
func sendDatagram(fd int, addr string) error {
	b := [1]byte{1}
	err := syscall.Sendto(fd, b[:], syscall.MSG_DONTWAIT, &syscall.SockaddrUnix{Name: "@" + addr})
	if err == syscall.EAGAIN {
		return nil
	}
	return err
}
