// Package glog carries godist's log messages from Go to Python's logging
// (the "godist" logger). Go code logs with Debugf, Infof, Warnf or Once;
// a record at or above the level Python set (SetLevel) waits in a bounded
// queue until the Python side drains it (capi's godist_log_drain, from one
// thread per process), so no Go thread ever calls into Python and nothing
// is written to stderr behind logging's back. Below the level, a call costs
// one atomic load.
package glog

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Level is a record's severity, with the numbers of Python's logging.
type Level int32

// The levels; Off disables logging.
const (
	Debug   Level = 10
	Info    Level = 20
	Warning Level = 30
	Error   Level = 40
	Off     Level = 100
)

// Capacity bounds the queue: past it the oldest records are dropped (and
// counted in a warning of their own).
const Capacity = 4096

var threshold atomic.Int32

func init() { threshold.Store(int32(Warning)) }

// SetLevel sets the lowest level recorded.
func SetLevel(l Level) { threshold.Store(int32(l)) }

// Enabled reports whether records at level l are kept: check it before
// building an expensive message.
func Enabled(l Level) bool { return int32(l) >= threshold.Load() }

// Record is one message.
type Record struct {
	Level Level
	Msg   string
}

// queue holds records until Drain.
type queue struct {
	mu      sync.Mutex
	recs    []Record
	dropped int
	signal  chan struct{}
}

var q = queue{signal: make(chan struct{}, 1)}

// Logf records a message at level l.
func Logf(l Level, format string, args ...any) {
	if !Enabled(l) {
		return
	}
	r := Record{Level: l, Msg: fmt.Sprintf(format, args...)}
	q.mu.Lock()
	if len(q.recs) >= Capacity {
		q.recs = q.recs[1:]
		q.dropped++
	}
	q.recs = append(q.recs, r)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// Debugf, Infof and Warnf record a message at their level.
func Debugf(format string, args ...any) { Logf(Debug, format, args...) }
func Infof(format string, args ...any)  { Logf(Info, format, args...) }
func Warnf(format string, args ...any)  { Logf(Warning, format, args...) }

var once sync.Map // key -> struct{}

// Once records a message at level l the first time it is called with key
// in this process, and never again.
func Once(key string, l Level, format string, args ...any) {
	if !Enabled(l) {
		return
	}
	if _, seen := once.LoadOrStore(key, struct{}{}); seen {
		return
	}
	Logf(l, format, args...)
}

// Drain waits up to wait for records and returns those queued, oldest
// first, as long as take accepts them (it is called in order; the first it
// refuses stays queued, unless it is the first of all, which is returned
// alone so that a record too large for the caller is not stuck). Records
// dropped since the last Drain are reported by a warning first.
func Drain(wait time.Duration, take func(Record) bool) []Record {
	deadline := time.Now().Add(wait)
	for {
		q.mu.Lock()
		if q.dropped > 0 {
			q.recs = append([]Record{{Level: Warning, Msg: fmt.Sprintf("godist: %d log messages were dropped (more than %d waiting)", q.dropped, Capacity)}}, q.recs...)
			q.dropped = 0
		}
		if len(q.recs) > 0 {
			k := 0
			for k < len(q.recs) && take(q.recs[k]) {
				k++
			}
			k = max(k, 1)
			out := append([]Record(nil), q.recs[:k]...)
			q.recs = q.recs[k:]
			q.mu.Unlock()
			return out
		}
		q.mu.Unlock()
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		t := time.NewTimer(left)
		select {
		case <-q.signal:
		case <-t.C:
		}
		t.Stop()
	}
}

// Reset empties the queue and forgets Once's keys (for tests).
func Reset() {
	q.mu.Lock()
	q.recs, q.dropped = nil, 0
	q.mu.Unlock()
	once.Range(func(k, _ any) bool { once.Delete(k); return true })
}
