//go:build !amd64 || purego

package reduce

// No vector kernels: the Go loops do everything.

const hasAVX2, hasF16C = false, false

var useAVX2, useF16C = false, false

func addBF16Vec(z, x, y []uint16) int                  { return 0 }
func mulBF16Vec(z, x, y []uint16) int                  { return 0 }
func addF16Vec(z, x, y []uint16) int                   { return 0 }
func mulF16Vec(z, x, y []uint16) int                   { return 0 }
func mulScalarBF16Vec(z []uint16, f float32) int       { return 0 }
func divScalarBF16Vec(z []uint16, f float32) int       { return 0 }
func mulScalarF16Vec(z []uint16, f float32) int        { return 0 }
func divScalarF16Vec(z []uint16, f float32) int        { return 0 }
func minHalfVec(z, x, y []uint16, inf, nan uint16) int { return 0 }
func maxHalfVec(z, x, y []uint16, inf, nan uint16) int { return 0 }
