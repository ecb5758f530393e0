package nccl

import (
	"context"

	"github.com/godist/godist/libgodist/backend"
)

// Accelerator is NCCL as a backend.Accelerator.
type Accelerator struct{}

var _ backend.Accelerator = Accelerator{}

// Name implements backend.Accelerator.
func (Accelerator) Name() string { return "nccl" }

// Load implements backend.Accelerator.
func (Accelerator) Load() error {
	_, err := Load()
	return err
}

// UniqueID implements backend.Accelerator.
func (Accelerator) UniqueID() ([]byte, error) {
	l, err := Load()
	if err != nil {
		return nil, err
	}
	return l.UniqueID()
}

// Open implements backend.Accelerator.
func (Accelerator) Open(ctx context.Context, s backend.DeviceSetup) (backend.DeviceComm, error) {
	c, err := NewComm(ctx, s)
	if err != nil {
		return nil, err
	}
	return c, nil
}
