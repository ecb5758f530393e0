package tcp

import (
	"runtime"
	"strings"
)

// goroutineIn reports whether some goroutine is in state (as a stack dump
// shows it: "syscall", "IO wait", ...) with every one of fns in its stack
// (function names or a "created by" line).
func goroutineIn(state string, fns ...string) bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
next:
	for _, g := range strings.Split(string(buf), "\n\n") {
		head, _, _ := strings.Cut(g, "\n")
		i, j := strings.Index(head, "["), strings.Index(head, "]")
		if i < 0 || j < i {
			continue
		}
		if st, _, _ := strings.Cut(head[i+1:j], ","); st != state {
			continue
		}
		for _, fn := range fns {
			if !strings.Contains(g, fn) {
				continue next
			}
		}
		return true
	}
	return false
}
