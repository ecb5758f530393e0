package shm

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"strconv"
	"sync/atomic"
	"time"
)

// The idle receiver's doorbell socket.
//
// The receiver goroutine (recvLoop) of a rank with nothing in flight used
// to sleep on a futex in shared memory. A goroutine asleep in a system
// call keeps its P, and the Go runtime's monitor takes back a P held
// 10 ms in one call and then polls every 20 µs for a millisecond and
// more, so the sleeps had to stay short (WaitPolicy.Idle, 8 ms): an idle
// group still woke each of its processes a few hundred times a second.
//
// Instead, each rank binds a datagram socket in the abstract Unix
// namespace (the name derives from the arena's path and the local rank)
// and its receiver, once idle for deepIdle, waits on it parked in Go's
// network poller: no thread, no P, no system call, for idlePark at a time
// (after which it looks at its peers' liveness). A sender that finds the
// receiver parked there (ctlIdle+4 == sleepDoor) sends it one byte. Ranks that cannot
// reach each other's sockets (another network namespace, a name taken)
// fall back to the futex: a sender whose datagram fails sets the
// receiver's ctlDoorOff, and the receiver, at the latest idlePark later,
// sleeps on the futex from then on.

// idlePark is the longest wait of an idle receiver parked on its
// doorbell. A variable so tests can shorten it.
var idlePark = 50 * time.Millisecond

// deepIdle is how long the receiver must have found nothing to deliver
// before it parks on the doorbell; until then it sleeps on the futex
// (WaitPolicy.Idle at a time), which a sender or a waiter handing over a
// streamed message wakes one thread hop sooner. A variable so tests can
// change it.
var deepIdle = 100 * time.Millisecond

// What an idle receiver sleeps on (the flag at ctlIdle+4).
const (
	sleepNone  = 0
	sleepFutex = 1
	sleepDoor  = 2
)

// door is a rank's doorbell sockets. Fixed after Attach.
type door struct {
	in   *net.UnixConn // this rank's doorbell; nil when unavailable
	out  atomic.Int32  // unbound datagram socket to ring peers' doorbells; -1 when unavailable
	base string        // address of local rank r: base + "." + r; set by Open
}

// doorBase derives the doorbell addresses' common prefix from the arena's
// path (abstract names, so nothing is created on disk).
func doorBase(path string) string {
	h := sha256.Sum256([]byte("godist-shm-door:" + path))
	return "godist-door-" + hex.EncodeToString(h[:12])
}

func (d *door) addr(r int) string { return d.base + "." + strconv.Itoa(r) }

// openDoor binds this rank's doorbell and the socket that rings the
// peers'. Failures leave the receiver on the futex.
func (a *Arena) openDoor() {
	d := &a.p2p.door
	if !supported {
		return
	}
	out, err := dgramSocket()
	if err != nil {
		return
	}
	in, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: "@" + d.addr(a.rank), Net: "unixgram"})
	if err != nil {
		closeFD(out)
		return
	}
	d.in = in
	d.out.Store(int32(out))
}

// closeDoor releases the doorbell sockets once the receiver has exited
// and no operation runs (a.life held exclusively).
func (a *Arena) closeDoor() {
	d := &a.p2p.door
	if d.in != nil {
		_ = d.in.Close()
	}
	if out := d.out.Swap(-1); out >= 0 {
		closeFD(int(out))
	}
}

// doorUsable reports whether this rank's idle receiver may park on its
// doorbell.
func (a *Arena) doorUsable() bool {
	return a.p2p.door.in != nil && a.u32(a.ctl(a.rank)+ctlDoorOff).Load() == 0
}

// ringDoor sends one byte to local rank r's doorbell (r's receiver is
// parked on it). If the datagram cannot be delivered (other than because
// r's queue is full, which means r is being woken already), r is told to
// use the futex.
func (a *Arena) ringDoor(r int) {
	d := &a.p2p.door
	if out := d.out.Load(); out < 0 || sendDatagram(int(out), d.addr(r)) != nil {
		a.u32(a.ctl(r) + ctlDoorOff).Store(1)
	}
}

// parkOnDoor waits on this rank's doorbell for at most dur, then drains
// the datagrams that came (each is just a wake-up).
func (a *Arena) parkOnDoor(dur time.Duration) {
	in := a.p2p.door.in
	var b [16]byte
	if in.SetReadDeadline(time.Now().Add(dur)) != nil {
		return
	}
	if _, err := in.Read(b[:]); err != nil {
		return
	}
	// Drain: a read deadline in the past fails at once once empty.
	if in.SetReadDeadline(time.Unix(1, 0)) != nil {
		return
	}
	for i := 0; i < 64; i++ {
		if _, err := in.Read(b[:]); err != nil {
			return
		}
	}
}

// wakeIdleOf wakes local rank r's idle receiver, wherever it sleeps.
//
// The futex is woken even when the flag says doorbell: the receiver may
// be leaving the doorbell for the futex as the flag is read.
func (a *Arena) wakeIdleOf(r int) {
	c := a.ctl(r)
	a.u32(c + ctlIdle).Add(1)
	futexWake((*uint32)(a.ptr(c + ctlIdle)))
	if a.u32(c+ctlIdle+4).Load() == sleepDoor {
		a.ringDoor(r)
	}
}
