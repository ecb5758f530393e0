//go:build !amd64 && !arm64

package shm

// pause is a CPU spin-wait hint; this architecture has none we use.
func pause() {}
