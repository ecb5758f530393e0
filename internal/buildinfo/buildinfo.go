// Package buildinfo reads the version control stamp the Go toolchain puts
// in a binary.
package buildinfo

import "runtime/debug"

// Stamp is the main module and its version control stamp; empty fields
// when the build was not stamped.
type Stamp struct {
	Module   string
	Revision string
	Time     string
	Modified bool
}

// Read returns the running binary's Stamp.
func Read() Stamp {
	var s Stamp
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return s
	}
	s.Module = info.Main.Path
	for _, kv := range info.Settings {
		switch kv.Key {
		case "vcs.revision":
			s.Revision = kv.Value
		case "vcs.time":
			s.Time = kv.Value
		case "vcs.modified":
			s.Modified = kv.Value == "true"
		}
	}
	return s
}
