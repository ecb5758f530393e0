package mpi

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPieces checks how many MPI messages carry a payload: one for an
// empty one, then one per started piece of pieceBytes.
func TestPieces(t *testing.T) {
	for _, c := range []struct{ n, want int }{
		{0, 1}, {1, 1}, {pieceBytes - 1, 1}, {pieceBytes, 1}, {pieceBytes + 1, 2}, {3 * pieceBytes, 3},
	} {
		require.Equal(t, c.want, pieces(c.n), "n=%d", c.n)
	}
}
