//go:build race

package hier

// raceEnabled: the race detector slows the large buffers' copies tenfold;
// they run without it.
const raceEnabled = true
