package shm

import (
	"context"
	"errors"
	"fmt"

	"github.com/godist/godist/libgodist/transport"
)

var (
	// ErrUnsupported is returned by Open on platforms without futexes and
	// shared file mappings (everything but Linux).
	ErrUnsupported = errors.New("shm: shared-memory arenas are not supported on this platform")
	// ErrInvalid is wrapped by errors for bad arguments, detected before the
	// arena is touched (the other ranks then wait until their deadline).
	ErrInvalid = errors.New("shm: invalid argument")
	// ErrConfig is wrapped when a joining rank's Config disagrees with the
	// layout the creator wrote into the arena, or the file is not an arena.
	ErrConfig = errors.New("shm: arena configuration mismatch")
	// ErrDesync is wrapped when ranks run different operations at the same
	// point (for example an all-reduce against a broadcast, or different
	// roots). The arena cannot tell how far each rank got, so it is broken.
	ErrDesync = errors.New("shm: ranks are running different operations")
	// ErrBroken is wrapped by every collective issued after one failed with
	// a timeout, a lost peer or a desync; the arena must be closed.
	ErrBroken = errors.New("shm: arena is broken by an earlier error")
)

// errClosed is the error of operations on an arena that is closed or
// closing on this rank.
func errClosed(op string) error {
	return fmt.Errorf("shm: %s: %w", op, transport.ErrClosed)
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// ctxErr maps a finished context to the transport's sentinels, like
// transport.Recv.Wait does.
func ctxErr(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return transport.ErrTimeout
	}
	return fmt.Errorf("%w: %v", transport.ErrClosed, context.Cause(ctx))
}

// fatal reports whether err leaves the arena in an unknown state (so later
// collectives must not run). Argument and size-mismatch errors are
// detected by every rank at the same step and leave it consistent.
func fatal(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrDesync) {
		return true
	}
	return !errors.Is(err, ErrInvalid) && !errors.Is(err, transport.ErrSizeMismatch) && !errors.Is(err, errCombine)
}

// errCombine is wrapped around errors returned by a caller's combine
// function; every rank gets the same one and the arena stays consistent.
var errCombine = errors.New("shm: combine failed")
