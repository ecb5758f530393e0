//go:build amd64 || arm64

package shm

// pause is a CPU spin-wait hint (PAUSE on amd64, YIELD on arm64).
//
//go:noescape
func pause()
