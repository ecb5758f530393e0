//go:build !linux

package shm

import (
	"runtime"
	"time"
)

// Stand-ins so the package builds everywhere; Open returns ErrUnsupported
// before any of them matters.

const supported = false

func futexWait(addr *uint32, val uint32, d time.Duration)          { time.Sleep(min(d, 50*time.Microsecond)) }
func futexWake(addr *uint32)                                       {}
func schedYield()                                                  { runtime.Gosched() }
func openPidfd(pid int) int                                        { return -1 }
func closeFD(fd int)                                               {}
func exited(pid, pidfd int) bool                                   { return false }
func pidNamespace() uint64                                         { return 0 }
func readProcess(pid int, addr uintptr, p []byte) (int, error)     { return 0, ErrUnsupported }
func writeProcess(pid int, addr uintptr, p []byte) (int, error)    { return 0, ErrUnsupported }
func createFile(path string, total int, mark bool) ([]byte, error) { return nil, ErrUnsupported }
func removeFailed(path string)                                     {}
func openFile(path string) (int, error)                            { return -1, ErrUnsupported }
func fileSize(fd int) (int64, error)                               { return 0, ErrUnsupported }
func mapFD(fd, n int) ([]byte, error)                              { return nil, ErrUnsupported }
func unmap(mem []byte) error                                       { return nil }
func unlink(path string) error                                     { return nil }
func currentCPU() (int, bool)                                      { return 0, false }
func getAffinity(m *cpuMask) bool                                  { return false }
func dgramSocket() (int, error)                                    { return -1, ErrUnsupported }
func sendDatagram(fd int, addr string) error                       { return ErrUnsupported }
func setAffinity(m *cpuMask) bool                                  { return false }
