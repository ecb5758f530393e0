//go:build race

package tcp

import "sync/atomic"

// ioSync tells the race detector what the kernel does: bytes written to a
// socket happen before they are read from it (Go's net package makes the
// same annotation around its reads and writes).
var ioSync atomic.Uint64

func ioRelease() { ioSync.Add(1) }
func ioAcquire() { ioSync.Load() }
