package shm

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestProbe(t *testing.T) {
	id, err := LocalHostID()
	require.NoError(t, err)
	require.NotEmpty(t, id.Hostname)
	require.Len(t, id.BootID, 36)
	p, err := NewProbe("")
	require.NoError(t, err)
	require.True(t, SeesProbe(p.Path, p.Token))
	require.False(t, SeesProbe(p.Path, "other"))
	require.NoError(t, p.Remove())
	require.False(t, SeesProbe(p.Path, p.Token))
	require.True(t, Usable(""))
	require.False(t, Usable("/nonexistent-dir"))
}

// The offloader's arena names (arenaName) are stable for a group
// instance, differ between sessions and groups, and are valid whatever the
// group's name.
func TestArenaName(t *testing.T) {
	a := arenaName(42, "pg0")
	require.Equal(t, a, arenaName(42, "pg0"))
	require.NotEqual(t, a, arenaName(43, "pg0"))
	require.NotEqual(t, a, arenaName(42, "pg1"))
	require.NotEqual(t, a, arenaName(42, "pg0/host0"))
	for _, name := range []string{a, arenaName(math.MaxUint64, strings.Repeat("g/ ", 2000))} {
		c := Config{Name: name, Rank: 0, Size: 1}
		require.NoError(t, c.normalize())
	}
}
