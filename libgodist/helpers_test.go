package libgodist

import "time"

// waitUntil polls cond until it holds or within has passed, and reports
// whether it held. Safe on any goroutine.
func waitUntil(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}
