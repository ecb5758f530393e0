package tcp

import (
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/godist/godist/libgodist/gosched"
)

// sock is a connected TCP socket taken out of Go's network poller: a
// non-blocking descriptor that goroutines read and write with plain
// system calls and wait on with poll(2) in their own thread.
//
// Go's poller wakes one of its threads for every arrival on every socket
// it watches, even when the goroutine that wants the bytes is already
// reading the socket itself, and then hands the message over to the
// waiting thread: two or three context switches per message, which on a
// machine whose cores are all busy with ranks cost more than the message.
// Here the thread that waits for a message sleeps on the socket and is
// the one the kernel wakes.
//
// Close is split in two: shut (shutdown(2)) wakes every thread blocked on
// the socket and makes later calls fail; release closes the descriptor
// once no call can be using it.
type sock struct {
	// lowat is the SO_RCVLOWAT last set (0: never set, the kernel's
	// default of 1); owned by whoever holds the reader's role.
	lowat  int
	fd     int
	mu     sync.RWMutex // held shared by calls, exclusively by release
	broken atomic.Bool  // shut locally: calls fail with net.ErrClosed
	freed  bool         // guarded by mu
}

// newSock takes c's descriptor out of the poller (a close-on-exec
// duplicate; c is closed).
func newSock(c *net.TCPConn) (*sock, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	var derr error
	if err := rc.Control(func(f uintptr) {
		fd, derr = dupCloexec(int(f))
	}); err != nil {
		return nil, err
	}
	_ = c.Close()
	if derr != nil {
		return nil, fmt.Errorf("tcp: duplicating a socket: %w", derr)
	}
	return sockFromFD(fd)
}

// sockFromFD makes a sock of a connected stream socket descriptor, which
// it then owns.
func sockFromFD(fd int) (*sock, error) {
	if err := syscall.SetNonblock(fd, true); err != nil {
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("tcp: socket: %w", err)
	}
	return &sock{fd: fd}, nil
}

// setLowat sets the socket's receive low-water mark to n bytes (at least
// 1), if it is not set so already. A failure is ignored: the mark only
// saves wake-ups.
func (s *sock) setLowat(n int) {
	n = max(n, 1)
	if n == max(s.lowat, 1) {
		return
	}
	if !s.acquire() {
		return
	}
	defer s.mu.RUnlock()
	s.lowat = n
	_ = syscall.SetsockoptInt(s.fd, syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, n)
}

// schedYield gives the CPU to another runnable thread, if there is one.
func schedYield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

func dupCloexec(fd int) (int, error) {
	for {
		r, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return -1, e
		}
		return int(r), nil
	}
}

// acquire takes a shared hold on the descriptor; false if it is shut.
func (s *sock) acquire() bool {
	s.mu.RLock()
	if s.freed || s.broken.Load() {
		s.mu.RUnlock()
		return false
	}
	return true
}

// read is one non-blocking read: (0, nil) when the socket has nothing now,
// errEOF when the peer closed its side. It is a raw system call: it never
// blocks, and a raw call does not wake the Go runtime's monitor thread,
// which an ordinary one does after the process was idle (a spinning
// waiter reads many times per message).
func (s *sock) read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if !s.acquire() {
		return 0, net.ErrClosed
	}
	defer s.mu.RUnlock()
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(s.fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		switch {
		case e == 0 && r == 0:
			if s.broken.Load() {
				return 0, net.ErrClosed
			}
			return 0, errEOF
		case e == 0:
			ioAcquire()
			return int(r), nil
		case e == syscall.EINTR:
			continue
		case e == syscall.EAGAIN:
			return 0, nil
		default:
			return 0, s.opErr("read", e)
		}
	}
}

// write writes all of b, waiting in poll(2) while the socket is full,
// until deadline (zero: none). A partial write is reported with its
// error.
func (s *sock) write(b []byte, deadline time.Time, wait roomWaiter) error {
	return s.writeParts([][]byte{b}, len(b), deadline, wait)
}

// writeFrame writes one frame (header, payload, zero padding), gathering
// the parts in each sendmsg(2), in pieces of at most chunk bytes. The
// header never goes out on its own: a header alone on the wire wakes a
// receiver that then finds no payload and sleeps again (two wake-ups per
// message; a 32 KiB ping-pong ran at half gloo's speed with 8 ranks on 2
// cores). Pieces bound one call because one huge write holds the socket's
// lock while it copies, so the peer's acknowledgements queue in the
// backlog and the window opens late.
func (s *sock) writeFrame(hdr, data []byte, chunk int, deadline time.Time, wait roomWaiter) error {
	parts := [3][]byte{hdr, data, zeroPad[:padding(len(data))]}
	return s.writeParts(parts[:], chunk, deadline, wait)
}

// writeParts writes the parts back to back with sendmsg(2), at most chunk
// bytes (and three parts) a call, waiting in poll(2) while the socket is
// full, until deadline (zero: none); the waits for room are in wait (nil:
// poll(2) on the socket alone). It consumes parts (the slices are advanced
// in place).
func (s *sock) writeParts(parts [][]byte, chunk int, deadline time.Time, wait roomWaiter) error {
	if !s.acquire() {
		return net.ErrClosed
	}
	defer s.mu.RUnlock()
	ioRelease()
	chunk = max(chunk, 1)
	var iov [3]syscall.Iovec
	var tick gosched.Ticker
	for {
		for len(parts) > 0 && len(parts[0]) == 0 {
			parts = parts[1:]
		}
		if len(parts) == 0 {
			return nil
		}
		n, total := 0, 0
		for _, b := range parts {
			if len(b) == 0 {
				continue
			}
			k := min(len(b), chunk-total)
			if n == len(iov) || k <= 0 {
				break
			}
			iov[n] = syscall.Iovec{Base: &b[0]}
			iov[n].SetLen(k)
			n++
			total += k
		}
		msg := syscall.Msghdr{Iov: &iov[0]}
		msg.Iovlen = uint64(n)
		// MSG_NOSIGNAL: a peer that hung up is an error, not a SIGPIPE.
		r, _, e := syscall.RawSyscall(syscall.SYS_SENDMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&msg)), syscall.MSG_NOSIGNAL)
		switch e {
		case 0:
			for w := int(r); w > 0; {
				k := min(w, len(parts[0]))
				parts[0] = parts[0][k:]
				w -= k
				if len(parts[0]) == 0 {
					parts = parts[1:]
				}
			}
			continue
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
		default:
			return s.opErr("write", e)
		}
		now := time.Now()
		tick.Tick(now) // see maxPollWait
		wake := now.Add(maxPollWait)
		if !deadline.IsZero() && deadline.Before(wake) {
			wake = deadline
		}
		var err error
		if wait != nil {
			err = wait(s, wake)
		} else {
			err = s.pollLocked(pollOut, wake)
		}
		if err != nil && (err != os.ErrDeadlineExceeded || wake.Equal(deadline)) {
			return err
		}
	}
}

// roomWaiter waits until s, held by the caller (acquire), has room to
// write (or hangs up or fails) or until deadline (os.ErrDeadlineExceeded).
type roomWaiter func(s *sock, deadline time.Time) error

// zeroPad is the padding written after payloads.
var zeroPad [frameAlign]byte

const (
	pollIn  = 0x1 // POLLIN
	pollOut = 0x4 // POLLOUT
)

// waitReadable sleeps in poll(2) until the socket has bytes (or hangs up
// or fails) or until deadline (zero: none). It reports false on timeout.
func (s *sock) waitReadable(deadline time.Time) (bool, error) {
	if !s.acquire() {
		return false, net.ErrClosed
	}
	defer s.mu.RUnlock()
	err := s.pollLocked(pollIn, deadline)
	if err == os.ErrDeadlineExceeded {
		return false, nil
	}
	return err == nil, err
}

// park waits until the socket has bytes (or hangs up or fails) with the
// goroutine parked in Go's network poller: no thread sleeps for it and it
// holds no P. It is the wait of a reader goroutine, which may sit idle for
// as long as the group does.
//
// A goroutine blocked in poll(2) keeps its P, and the runtime's monitor
// thread takes back a P whose goroutine has sat in one system call for
// 10 ms; every such take-back puts the monitor back to waking every
// 20 µs for the next millisecond and more. Idle reader goroutines asleep
// in poll(2) caused nearly all of them: in a loop of 2 MiB all_to_alls
// over TCP with 8 ranks on 2 cores, ~200 take-backs a second per process,
// two thirds of all the context switches of the ranks.
//
// The socket is in the poller only while parked here (a duplicate
// descriptor, registered and removed around the wait): registered for
// good, every arrival would also wake the poller's thread while a waiter
// reads the socket itself.
func (s *sock) park() error {
	if !s.acquire() {
		return net.ErrClosed
	}
	defer s.mu.RUnlock()
	fd, err := dupCloexec(s.fd)
	if err != nil { // out of descriptors, say
		return s.pollLocked(pollIn, time.Time{})
	}
	f := os.NewFile(uintptr(fd), "godist-tcp")
	defer f.Close()
	rc, err := f.SyscallConn()
	var perr error
	if err == nil {
		err = rc.Read(func(uintptr) bool {
			ready, e := s.pollNowLocked()
			if e != nil {
				perr = e
				return true
			}
			return ready || s.broken.Load()
		})
	}
	switch {
	case s.broken.Load():
		return net.ErrClosed
	case perr != nil:
		return perr
	case err != nil:
		// The poller would not take the descriptor: wait the old way.
		return s.pollLocked(pollIn, time.Time{})
	}
	return nil
}

// pollNowLocked reports whether the socket has bytes (or has hung up or
// failed) right now, without waiting. Called with a shared hold.
func (s *sock) pollNowLocked() (bool, error) {
	var ts syscall.Timespec
	for {
		pfd := pollFd{fd: int32(s.fd), events: pollIn}
		_, _, e := syscall.RawSyscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		switch {
		case e == syscall.EINTR:
			continue
		case e != 0:
			return false, s.opErr("poll", e)
		}
		return pfd.revents != 0, nil
	}
}

// waitAnyReadable sleeps in one poll(2) over socks until one of them has
// bytes (or hangs up or fails) or until deadline (zero: none), and sets
// ready[i] to whether socks[i] is readable (all false on timeout). Only an
// error of the poll itself, or a sock shut locally, is returned.
func waitAnyReadable(socks []*sock, ready []bool, deadline time.Time) error {
	var pfdBuf [8]pollFd
	pfds := pfdBuf[:0]
	defer func() {
		for i := range pfds {
			socks[i].mu.RUnlock()
		}
	}()
	for _, s := range socks {
		if !s.acquire() {
			return net.ErrClosed
		}
		pfds = append(pfds, pollFd{fd: int32(s.fd), events: pollIn})
	}
	for i := range ready {
		ready[i] = false
	}
	switch err := pollUntil(pfds, deadline); {
	case err == os.ErrDeadlineExceeded:
		return nil
	case err != nil:
		return err
	}
	for i := range pfds {
		ready[i] = pfds[i].revents != 0
	}
	return nil
}

// pollUntil sleeps in one poll(2) over pfds until one of them has an event
// or until deadline (zero: none), then os.ErrDeadlineExceeded.
func pollUntil(pfds []pollFd, deadline time.Time) error {
	for {
		var tsp *syscall.Timespec
		if !deadline.IsZero() {
			d := time.Until(deadline)
			if d <= 0 {
				return os.ErrDeadlineExceeded
			}
			ts := syscall.NsecToTimespec(int64(d))
			tsp = &ts
		}
		r, _, e := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfds[0])), uintptr(len(pfds)), uintptr(unsafe.Pointer(tsp)), 0, 0, 0)
		switch {
		case e == syscall.EINTR:
			continue
		case e != 0:
			return os.NewSyscallError("poll", e)
		case r == 0:
			continue // timed out: the loop checks the deadline
		}
		return nil
	}
}

type pollFd struct {
	fd      int32
	events  int16
	revents int16
}

// pollLocked waits for events on the socket; os.ErrDeadlineExceeded when
// deadline passes first. Called with a shared hold.
func (s *sock) pollLocked(events int16, deadline time.Time) error {
	for {
		var tsp *syscall.Timespec
		if !deadline.IsZero() {
			d := time.Until(deadline)
			if d <= 0 {
				return os.ErrDeadlineExceeded
			}
			ts := syscall.NsecToTimespec(int64(d))
			tsp = &ts
		}
		pfd := pollFd{fd: int32(s.fd), events: events}
		_, _, e := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(tsp)), 0, 0, 0)
		switch {
		case e == syscall.EINTR:
			continue
		case e != 0:
			return s.opErr("poll", e)
		case s.broken.Load():
			return net.ErrClosed
		case pfd.revents == 0:
			continue // timed out: the loop checks the deadline
		}
		return nil
	}
}

// readable reports whether the socket has bytes (or has hung up or
// failed) right now, without waiting. True if it cannot tell.
func (s *sock) readable() bool {
	if !s.acquire() {
		return true
	}
	defer s.mu.RUnlock()
	ready, err := s.pollNowLocked()
	return ready || err != nil
}

func (s *sock) opErr(op string, e syscall.Errno) error {
	if s.broken.Load() {
		return net.ErrClosed
	}
	return os.NewSyscallError(op, e)
}

// closeWrite sends FIN after the last frame.
func (s *sock) closeWrite() {
	if s.acquire() {
		_ = syscall.Shutdown(s.fd, syscall.SHUT_WR)
		s.mu.RUnlock()
	}
}

// shut breaks the connection: threads blocked on it wake and every later
// call fails with net.ErrClosed. Idempotent; the descriptor stays open
// until release.
func (s *sock) shut() {
	if s.broken.Swap(true) {
		return
	}
	s.mu.RLock()
	if !s.freed {
		_ = syscall.Shutdown(s.fd, syscall.SHUT_RDWR)
	}
	s.mu.RUnlock()
}

// release shuts the socket and closes its descriptor once no call holds
// it. Idempotent.
func (s *sock) release() {
	s.shut()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.freed {
		s.freed = true
		_ = syscall.Close(s.fd)
	}
}
