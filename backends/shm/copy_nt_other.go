//go:build !amd64

package shm

import "unsafe"

const haveCopyNT = false

func copyNT(dst, src unsafe.Pointer, n uintptr) {
	copy(unsafe.Slice((*byte)(dst), n), unsafe.Slice((*byte)(src), n))
}
