package shm

import (
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

func TestArenaName(t *testing.T) {
	a, b := ArenaName("store/", "42", "pg0"), ArenaName("store/4", "2", "pg0")
	require.NotEqual(t, a, b)
	require.Equal(t, a, ArenaName("store/", "42", "pg0"))
	c := Config{Name: a, Rank: 0, Size: 1}
	require.NoError(t, c.normalize())
}
