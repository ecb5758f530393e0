package shm

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Co-location helpers for the rendezvous. Two ranks may share an arena
// when they run on the same kernel (equal HostID) and see the same
// /dev/shm (each can read the other's Probe). The rendezvous publishes
// both through the store; nothing here reads launcher variables such as
// LOCAL_WORLD_SIZE, which are wrong for sub-groups.

// HostID identifies the kernel instance a process runs on.
type HostID struct {
	Hostname string
	BootID   string // /proc/sys/kernel/random/boot_id
}

// LocalHostID returns this process's HostID.
func LocalHostID() (HostID, error) {
	h, err := os.Hostname()
	if err != nil {
		return HostID{}, fmt.Errorf("shm: hostname: %w", err)
	}
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return HostID{}, fmt.Errorf("shm: boot id: %w", err)
	}
	return HostID{Hostname: h, BootID: strings.TrimSpace(string(b))}, nil
}

// Probe is a small file holding a random token. A peer that reads the same
// token at Path shares this rank's shared-memory directory.
type Probe struct {
	Path  string
	Token string
}

// NewProbe creates a probe file in dir ("" means DefaultDir). The caller
// removes it with Remove once its peers have checked it.
func NewProbe(dir string) (*Probe, error) {
	if dir == "" {
		dir = DefaultDir
	}
	var r [16]byte
	if _, err := rand.Read(r[:]); err != nil {
		return nil, fmt.Errorf("shm: probe token: %w", err)
	}
	tok := hex.EncodeToString(r[:])
	path := filepath.Join(dir, fmt.Sprintf("godist-probe-%d-%s", os.Getpid(), tok[:8]))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("shm: probe: %w", err)
	}
	_, err = f.WriteString(tok)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("shm: probe: %w", err)
	}
	return &Probe{Path: path, Token: tok}, nil
}

// Remove deletes the probe file.
func (p *Probe) Remove() error { return os.Remove(p.Path) }

// SeesProbe reports whether the file at path holds token, that is whether
// this process shares the directory of the rank that created the probe.
func SeesProbe(path, token string) bool {
	b, err := os.ReadFile(path)
	return err == nil && token != "" && string(b) == token
}

// Usable reports whether this process can create arenas in dir ("" means
// DefaultDir): the platform is supported and dir is a writable directory.
func Usable(dir string) bool {
	if !supported {
		return false
	}
	p, err := NewProbe(dir)
	if err != nil {
		return false
	}
	_ = p.Remove()
	return true
}
