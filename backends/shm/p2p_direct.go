package shm

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"runtime"
	"unsafe"

	"github.com/godist/godist/libgodist/transport"
)

// Single-copy point-to-point messages. A message of at least cmaMin bytes
// to a rank in another process (or this one) is not copied through the
// ring: the sender publishes a header with cmaFlag set and a descriptor
// holding the address of its data, and waits. The receiver copies the
// bytes straight out of the sender's memory into the posted receive with
// process_vm_readv (cross-memory attach), then consumes the descriptor,
// which releases the sender. One copy instead of two, and no streaming
// through a small ring.
//
// A receiver that cannot read the sender's memory (another pid namespace,
// a ptrace policy such as Yama's ptrace_scope >= 1 between unrelated
// processes, a seccomp filter) sets the channel's refused flag before
// consuming the descriptor; the sender then sends the same message, and
// every later one on that channel, through the ring.

// cmaMin is the smallest message sent by single copy.
const cmaMin = 64 << 10

// readMemory is readProcess; tests replace it to simulate a refusal.
var readMemory = readProcess

// cmaPossible reports whether local rank peer might read this process's
// memory: it runs in this pid namespace and the architecture is known.
func (a *Arena) cmaPossible(peer int) bool {
	if sysProcessVMReadv == 0 {
		return false
	}
	pr := a.procs[peer]
	return pr.check || pr.pid == os.Getpid()
}

// sendDirect publishes a single-copy descriptor for data and waits until
// peer has copied it. It reports false (and no error) if peer refused.
// The caller holds sendMu[peer].
func (a *Arena) sendDirect(c *opCtx, peer, ch int, tag transport.Tag, data []byte, stamp *transport.Stamp) (bool, error) {
	st := &a.p2p
	head := st.head[peer]
	var hb [msgHdr + transport.StampSize + cmaDesc]byte
	h := putMsgHdr(hb[:], tag, uint64(len(data))|cmaFlag, stamp)
	h = hb[:len(h)+cmaDesc]
	binary.LittleEndian.PutUint64(h[len(h)-cmaDesc:], uint64(uintptr(unsafe.Pointer(&data[0]))))
	if err := a.waitSpace(c, peer, ch, head, len(h)); err != nil {
		return false, err
	}
	a.ringCopy(ch, head, h, true)
	head += uint64(len(h))
	st.head[peer] = head
	a.u64(ch + chHead).Store(head)
	a.ring(peer)
	// The receiver consumes the descriptor once it has copied the data:
	// wait until it has, helping with the copy meanwhile (p2p_share.go).
	err := a.waitConsumed(c, peer, ch, head, data)
	runtime.KeepAlive(data)
	if err != nil {
		// The receiver may still be reading memory the caller reuses.
		a.u32(ch + chBroken).Store(1)
		a.ring(peer)
		return false, err
	}
	return a.u32(ch+chRefused).Load() == 0, nil
}

// recvDirect delivers a single-copy message of n bytes from src, stamped
// st, whose header of hdr bytes is at *tail, or refuses it. The caller
// holds the role.
func (a *Arena) recvDirect(mb *transport.Mailbox, src, ch int, tail *uint64, tag transport.Tag, n, hdr uint64, st *transport.Stamp) (bool, error) {
	if a.u64(ch+chHead).Load()-*tail < hdr+cmaDesc {
		return false, nil // published together with the header; not yet visible
	}
	var d [cmaDesc]byte
	a.ringCopy(ch, *tail+hdr, d[:], false)
	addr := uintptr(binary.LittleEndian.Uint64(d[0:]))
	if n > maxMessage {
		return true, &transport.PeerError{Op: "recv", Peer: a.globalRank(src),
			Err: fmt.Errorf("%w: corrupt message header from local rank %d (length %d)", transport.ErrConnLost, src, n)}
	}
	pid := a.procs[src].pid
	if !a.p2p.directOK[src] {
		var probe [1]byte
		if k, err := readMemory(pid, addr, probe[:]); err != nil || k != 1 || !a.cmaPossible(src) {
			a.u32(ch + chRefused).Store(1)
			a.consume(ch, tail, int(hdr+cmaDesc))
			return true, nil
		}
		a.p2p.directOK[src] = true
	}
	rd := directReader{a: a, src: src, ch: ch, pid: pid, addr: addr, left: int(n)}
	if err := a.deliver(mb, src, tag, int(n), st, &rd); err != nil {
		return true, err
	}
	a.consume(ch, tail, int(hdr+cmaDesc))
	return true, nil
}

// directReader reads a single-copy message out of the sender's memory.
type directReader struct {
	a    *Arena
	src  int
	ch   int // the channel from src
	pid  int
	addr uintptr // the next byte to read, in src's memory
	off  int     // bytes read so far
	left int
}

func (r *directReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	p = p[:min(len(p), r.left)]
	var k int
	var err error
	if len(p) >= shareMin && r.a.p2p.share.Load() {
		k, err = r.a.readShared(r, p)
	} else if k, err = readMemory(r.pid, r.addr, p); err != nil || k == 0 {
		err = r.readErr(err)
	}
	if err != nil {
		return 0, err
	}
	r.addr += uintptr(k)
	r.off += k
	r.left -= k
	return k, nil
}

// readErr is the error of a failed read of src's memory.
func (r *directReader) readErr(err error) error {
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return &transport.PeerError{Op: "recv", Peer: r.a.globalRank(r.src),
		Err: fmt.Errorf("%w: reading local rank %d's memory: %v", transport.ErrConnLost, r.src, err)}
}
