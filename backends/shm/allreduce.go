package shm

import (
	"context"

	"github.com/godist/godist/libgodist/algo"
)

// maxElemSize bounds element sizes (complex128 is 16 bytes); with
// MinChunkSize every rank's share of a chunk holds at least one element.
const maxElemSize = 32

// AllReduce reduces buf in place across the local ranks: afterwards every
// rank's buf holds buf_0 (op) buf_1 (op) ... (op) buf_{Size-1}, combined in
// rank order with combine, bitwise identical on every rank. Every rank
// must pass the same len(buf) and elemSize (else every rank gets an error
// wrapping transport.ErrSizeMismatch and the arena stays usable). buf is
// the caller's; the arena does not keep it after AllReduce returns.
//
// Algorithms: one-shot (allreduce_oneshot.go) up to OneShotMax bytes,
// two-shot (allreduce_twoshot.go) above, as algo.ShmAllReduce chooses.
//
// Errors: ErrInvalid for bad arguments; *transport.PeerError wrapping
// transport.ErrTimeout, ErrConnLost, ErrPeerGone, ErrSizeMismatch or
// ErrDesync; transport.ErrClosed after Close; ErrBroken after a fatal error.
func (a *Arena) AllReduce(ctx context.Context, buf []byte, elemSize int, combine CombineFunc) error {
	const op = "allreduce"
	if elemSize <= 0 || elemSize > maxElemSize || len(buf)%elemSize != 0 {
		return invalidf("%s: buffer of %d bytes is not a whole number of %d-byte elements (1-%d)", op, len(buf), elemSize, maxElemSize)
	}
	if combine == nil {
		return invalidf("%s: nil combine function", op)
	}
	c, err := a.begin(ctx, op)
	if err != nil {
		return err
	}
	if a.size == 1 {
		return a.end(nil)
	}
	d := desc{kind: kindAllReduce, arg: uint32(elemSize), n: uint64(len(buf))}
	if algo.ShmAllReduce(len(buf), a.lay.oneShot) == algo.ShmOneShot {
		err = a.allReduceOneShot(&c, buf, d, combine)
	} else {
		err = a.allReduceTwoShot(&c, buf, d, combine)
	}
	return a.end(err)
}
