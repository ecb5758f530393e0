package glog

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func all(Record) bool { return true }

func TestLevelsAndOrder(t *testing.T) {
	Reset()
	defer SetLevel(Warning)
	SetLevel(Info)
	Debugf("hidden %d", 1)
	Infof("first %d", 1)
	Warnf("second")
	Logf(Error, "third")
	got := Drain(0, all)
	require.Equal(t, []Record{{Info, "first 1"}, {Warning, "second"}, {Error, "third"}}, got)
	require.False(t, Enabled(Debug))
	require.True(t, Enabled(Info))
	SetLevel(Off)
	Logf(Error, "off")
	require.Empty(t, Drain(0, all))
}

func TestOnce(t *testing.T) {
	Reset()
	for i := 0; i < 3; i++ {
		Once("k", Warning, "once %d", i)
		Once("other", Warning, "other %d", i)
	}
	require.Equal(t, []Record{{Warning, "once 0"}, {Warning, "other 0"}}, Drain(0, all))
}

func TestDrainWaitsAndTakes(t *testing.T) {
	Reset()
	go func() { Warnf("late") }()
	got := Drain(10*time.Second, all)
	require.Equal(t, []Record{{Warning, "late"}}, got)
	start := time.Now()
	require.Empty(t, Drain(20*time.Millisecond, all))
	require.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond)

	// take refuses the second record: it stays for the next Drain; a
	// first record take refuses comes back alone.
	Warnf("a")
	Warnf("b")
	n := 0
	got = Drain(0, func(Record) bool { n++; return n < 2 })
	require.Equal(t, []Record{{Warning, "a"}}, got)
	got = Drain(0, func(Record) bool { return false })
	require.Equal(t, []Record{{Warning, "b"}}, got)
}

func TestOverflowDropsOldestAndSaysSo(t *testing.T) {
	Reset()
	for i := 0; i < Capacity+5; i++ {
		Warnf("m%d", i)
	}
	got := Drain(0, all)
	require.Len(t, got, Capacity+1)
	require.Equal(t, Record{Warning, fmt.Sprintf("godist: 5 log messages were dropped (more than %d waiting)", Capacity)}, got[0])
	require.Equal(t, "m5", got[1].Msg)
	require.Equal(t, fmt.Sprintf("m%d", Capacity+4), got[len(got)-1].Msg)
}
