package shm

import "unsafe"

// overlap reports whether x and y share memory.
func overlap(x, y []byte) bool {
	if len(x) == 0 || len(y) == 0 {
		return false
	}
	px := uintptr(unsafe.Pointer(unsafe.SliceData(x)))
	py := uintptr(unsafe.Pointer(unsafe.SliceData(y)))
	return px < py+uintptr(len(y)) && py < px+uintptr(len(x))
}

// same reports whether x and y are the same memory.
func same(x, y []byte) bool {
	return len(x) == len(y) && (len(x) == 0 || unsafe.SliceData(x) == unsafe.SliceData(y))
}
