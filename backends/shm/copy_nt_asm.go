//go:build amd64

package shm

import "unsafe"

// haveCopyNT reports whether copyNT is a real non-temporal copy.
const haveCopyNT = true

// copyNT copies n bytes from src to dst with non-temporal stores and a
// store fence; n is a multiple of 64 and dst is 64-byte aligned.
//
//go:noescape
func copyNT(dst, src unsafe.Pointer, n uintptr)
