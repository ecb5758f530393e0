package libgodist

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"time"

	"github.com/godist/godist/backends/shm"
	"github.com/godist/godist/libgodist/reduce"
	"github.com/godist/godist/libgodist/wire"
)

// Co-location: ranks share memory when they run on one host (same hostname
// and boot id in their rendezvous records) and each can see the others'
// probe file in /dev/shm (so they share the same /dev/shm, which containers
// on one host may not). The decision is agreed by all ranks over TCP before
// use, so a rank with a different view cannot desynchronize the group.
// Today shared memory is used when every rank of the group is co-located;
// groups spanning hosts use TCP only.

// shmOpenTimeout bounds arena setup; on failure the group stays on TCP.
var shmOpenTimeout = 10 * time.Second

// Transport names accepted in Config.Transport.
const (
	TransportAuto = ""    // shared memory between co-located ranks, TCP otherwise
	TransportTCP  = "tcp" // TCP only
)

// makeProbe creates this rank's probe file and returns its name ("" if
// /dev/shm is unusable).
func makeProbe() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return ""
	}
	name := fmt.Sprintf("godist-probe-%d-%s", os.Getpid(), hex.EncodeToString(b[:]))
	f, err := os.OpenFile(filepath.Join(shm.DefaultDir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return ""
	}
	f.Close()
	return name
}

func removeProbe(name string) {
	if name != "" {
		_ = os.Remove(filepath.Join(shm.DefaultDir, name))
	}
}

// tcpSpin is how long a goroutine waiting for a TCP message reads the
// sockets itself before it sleeps (tcp.Transport.SetSpin), when this
// host's ranks of the group do not outnumber its cores.
const tcpSpin = 200 * time.Microsecond

// everyHostSpare reports whether on every host of recs the group's ranks
// there fit the CPUs its records name. Every rank computes the same answer
// from the same records, so it may choose what goes on the wire; a record
// that names no CPUs (an older writer) makes it false.
func everyHostSpare(recs []wire.PeerRecord) bool {
	type host struct{ name, boot string }
	ranks, cpus := map[host]int{}, map[host]int32{}
	for _, r := range recs {
		h := host{r.Hostname, r.BootID}
		ranks[h]++
		if c, ok := cpus[h]; !ok || r.CPUs < c {
			cpus[h] = r.CPUs
		}
	}
	for h, n := range ranks {
		if int(cpus[h]) < n {
			return false
		}
	}
	return len(recs) > 0
}

// sameHost counts the ranks of recs on me's host (me included).
func sameHost(me wire.PeerRecord, recs []wire.PeerRecord) int {
	n := 0
	for _, r := range recs {
		if r.Hostname == me.Hostname && r.BootID == me.BootID {
			n++
		}
	}
	return n
}

// colocated reports whether, as seen from me, every rank shares this
// host's memory.
func colocated(me wire.PeerRecord, recs []wire.PeerRecord) bool {
	if me.BootID == "" {
		return false
	}
	for _, r := range recs {
		if r.Hostname != me.Hostname || r.BootID != me.BootID || r.ShmProbe == "" {
			return false
		}
		if _, err := os.Stat(filepath.Join(shm.DefaultDir, r.ShmProbe)); err != nil {
			return false
		}
	}
	return true
}

// reservedSeq is the first of the sequence numbers godist uses for its own
// setup rounds (counting down); user collectives count up from 1.
const reservedSeq = 1<<44 - 1

// agree returns true only if every rank passes ok == true: a one-byte BAND
// all-reduce on the transport under reserved sequence number reservedSeq-round.
func (pg *ProcessGroup) agree(ctx context.Context, round uint64, ok bool) (bool, error) {
	b := []byte{0}
	if ok {
		b[0] = 1
	}
	c := &comm{tr: pg.tr, ctx: ctx, seq: reservedSeq - round, rank: pg.cfg.Rank, size: pg.cfg.Size}
	if err := allReduceRD(c, b, reduceSpec{dt: reduce.Bool, op: reduce.BAnd}); err != nil {
		return false, err
	}
	return b[0] == 1, nil
}

// arenaName derives the shared file's name from the group's session.
func arenaName(session uint64, group string) string {
	h := fnv.New64a()
	h.Write([]byte(group))
	return fmt.Sprintf("godist-%016x-%016x", session, h.Sum64())
}

// setupShm decides on shared memory with the other ranks and opens the
// arena. It returns nil (TCP only) when any rank cannot use it.
func (pg *ProcessGroup) setupShm(ctx context.Context, me wire.PeerRecord, recs []wire.PeerRecord, session uint64) (*shm.Arena, error) {
	want := pg.cfg.Transport != TransportTCP && colocated(me, recs)
	ok, err := pg.agree(ctx, 0, want)
	removeProbe(me.ShmProbe)
	if err != nil || !ok {
		return nil, err
	}
	octx, cancel := context.WithTimeout(ctx, shmOpenTimeout)
	defer cancel()
	mode := shm.ModeJoin
	if pg.cfg.Rank == 0 {
		mode = shm.ModeCreate
	}
	a, oerr := shm.Open(octx, shm.Config{Name: arenaName(session, pg.cfg.Group), Rank: pg.cfg.Rank, Size: pg.cfg.Size, Mode: mode})
	ok, err = pg.agree(ctx, 1, oerr == nil)
	if err != nil || !ok {
		if a != nil {
			a.Close()
		}
		return nil, err
	}
	return a, nil
}
