//go:build !race

package tcp

func ioRelease() {}
func ioAcquire() {}
