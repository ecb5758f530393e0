//go:build !amd64 || purego

package reduce

const hasAVX2 = false

func addBF16Vec(z, x, y []uint16) int { return 0 }

var useAVX2 = false
