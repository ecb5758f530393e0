package shm

import (
	"fmt"
	"runtime"
)

// Check is what `python -m godist info` reports about shared memory
// (godist_probe_shm writes it as JSON).
type Check struct {
	Dir    string `json:"dir"`
	Usable bool   `json:"usable"`
	// Reason says why a group could not use shared memory from this
	// process; "" when Usable.
	Reason   string `json:"reason"`
	Hostname string `json:"hostname"`
	BootID   string `json:"boot_id"`
}

// CheckDir checks what the offloader needs on this rank's side of the
// rendezvous, in dir ("" for DefaultDir): a supported platform and a
// writable dir (Usable, which creates and removes a probe file as Describe
// does), a probe file that reads back as its peers read it (SeesProbe),
// and the host's boot id, without which no rank counts as co-located.
func CheckDir(dir string) Check {
	if dir == "" {
		dir = DefaultDir
	}
	p := Check{Dir: dir}
	host, herr := LocalHostID()
	p.Hostname, p.BootID = host.Hostname, host.BootID
	if !Usable(dir) {
		// Usable says no without saying why: a probe of our own tells
		// the directory's failure apart from an unsupported platform.
		probe, err := NewProbe(dir)
		if err != nil {
			p.Reason = err.Error()
			return p
		}
		_ = probe.Remove()
		p.Reason = fmt.Sprintf("shm: shared memory is not supported on %s/%s", runtime.GOOS, runtime.GOARCH)
		return p
	}
	probe, err := NewProbe(dir)
	if err != nil {
		p.Reason = err.Error()
		return p
	}
	seen := SeesProbe(probe.Path, probe.Token)
	_ = probe.Remove()
	switch {
	case !seen:
		p.Reason = fmt.Sprintf("shm: the probe file %s did not read back as written", probe.Path)
	case herr != nil:
		p.Reason = herr.Error() + " (ranks without a boot id are never counted as on one host)"
	case host.BootID == "":
		p.Reason = "shm: the boot id (/proc/sys/kernel/random/boot_id) is empty (ranks without a boot id are never " +
			"counted as on one host)"
	default:
		p.Usable = true
	}
	return p
}
