package nccl

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/godist/godist/libgodist/backend"
	"github.com/godist/godist/libgodist/reduce"
)

// hasDriver reports whether this host has the NVIDIA kernel driver.
func hasDriver() bool {
	_, err := os.Stat("/proc/driver/nvidia")
	return err == nil
}

// TestLoadWheel loads the wheel's libnccl.so.2 and libcudart.so.13 (TestMain
// points Load's Config at them): no GPU is
// needed to load them, ask their versions or make a unique id.
func TestLoadWheel(t *testing.T) {
	if !wheelLoaded {
		t.Skip("no nvidia-nccl and nvidia-cuda-runtime wheel libraries found, or GODIST_NCCL_LIBRARY / " +
			"GODIST_CUDART_LIBRARY already set")
	}
	h := ncclHeader(t)
	lib, err := Load()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if want := defineValue(t, h, "NCCL_VERSION_CODE"); int64(lib.Version) != want {
		t.Errorf("Version = %d, the wheel's nccl.h says %d", lib.Version, want)
	}
	if want := filepath.Join(sitePackages, "nvidia", "nccl", "lib", "libnccl.so.2"); lib.NCCLFrom != want {
		t.Errorf("NCCLFrom = %q, want %q", lib.NCCLFrom, want)
	}
	if lib.RuntimeVersion < 13000 {
		t.Errorf("RuntimeVersion = %d from libcudart.so.13", lib.RuntimeVersion)
	}
	if got, want := lib.VersionString(), versionString(lib.Version); !strings.HasPrefix(got, "2.") || got != want {
		t.Errorf("VersionString = %q", got)
	}
	a, err := lib.UniqueID()
	if err != nil {
		t.Fatalf("UniqueID: %v", err)
	}
	b, err := lib.UniqueID()
	if err != nil {
		t.Fatalf("second UniqueID: %v", err)
	}
	if len(a) != 128 || len(b) != 128 {
		t.Fatalf("UniqueID lengths %d, %d; want 128", len(a), len(b))
	}
	if bytes.Equal(a, b) {
		t.Error("two UniqueIDs are equal")
	}
	if bytes.Equal(a, make([]byte, 128)) {
		t.Error("UniqueID is all zeros")
	}

	n, err := lib.DeviceCount()
	if hasDriver() {
		t.Logf("NVIDIA driver present: DeviceCount = %d, %v", n, err)
		return
	}
	if err == nil {
		t.Fatalf("DeviceCount = %d without an NVIDIA driver", n)
	}
	var e *Error
	if !errors.As(err, &e) || e.Call != "cudaGetDeviceCount" || e.CUDA == 0 || e.Text == "" {
		t.Fatalf("DeviceCount: %v (%#v), want a CUDA error from cudaGetDeviceCount", err, e)
	}
	t.Logf("DeviceCount without a driver: %v", err)
}

func TestNewCommBadID(t *testing.T) {
	for _, id := range [][]byte{nil, make([]byte, 127), make([]byte, 129)} {
		c, err := NewComm(context.Background(), backend.DeviceSetup{Device: 0, Rank: 0, Size: 1, ID: id})
		if err == nil {
			c.Abort()
			t.Fatalf("NewComm with a %d-byte id succeeded", len(id))
		}
		if _, lerr := Load(); lerr != nil {
			// Not loadable here: NewComm says so before it looks at the id.
			if !errors.Is(err, ErrUnavailable) {
				t.Errorf("NewComm without NCCL: %v, want ErrUnavailable", err)
			}
			continue
		}
		if !errors.Is(err, backend.ErrUnsupported) || !strings.Contains(err.Error(), "128 bytes") {
			t.Errorf("NewComm with a %d-byte id: %v", len(id), err)
		}
	}
}

func TestDTypeTable(t *testing.T) {
	want := map[reduce.DType]int32{
		reduce.Float16: ncclFloat16, reduce.BFloat16: ncclBfloat16, reduce.Float32: ncclFloat32,
		reduce.Float64: ncclFloat64, reduce.Int8: ncclInt8, reduce.Uint8: ncclUint8, reduce.Int32: ncclInt32,
		reduce.Int64: ncclInt64, reduce.Bool: ncclUint8,
	}
	for d, w := range want {
		got, err := DType(d)
		if err != nil || got != w {
			t.Errorf("DType(%v) = %d, %v; want %d", d, got, err, w)
		}
	}
	for _, d := range []reduce.DType{reduce.Int16, reduce.Complex64, reduce.Complex128} {
		if _, err := DType(d); !errors.Is(err, backend.ErrUnsupported) {
			t.Errorf("DType(%v): %v, want ErrUnsupported", d, err)
		}
	}
}

func TestRedOpTable(t *testing.T) {
	for _, d := range []reduce.DType{reduce.Float32, reduce.Int64, reduce.BFloat16} {
		for o, w := range map[reduce.Op]int32{reduce.Sum: ncclSum, reduce.Avg: ncclAvg, reduce.Product: ncclProd,
			reduce.Min: ncclMin, reduce.Max: ncclMax} {
			if got, err := RedOp(o, d); err != nil || got != w {
				t.Errorf("RedOp(%v, %v) = %d, %v; want %d", o, d, got, err, w)
			}
		}
		for _, o := range []reduce.Op{reduce.BAnd, reduce.BOr, reduce.BXor} {
			if _, err := RedOp(o, d); !errors.Is(err, backend.ErrUnsupported) {
				t.Errorf("RedOp(%v, %v): %v, want ErrUnsupported", o, d, err)
			}
		}
	}
	// On bool (as uint8) SUM is a logical or, PRODUCT a logical and.
	for o, w := range map[reduce.Op]int32{reduce.Sum: ncclMax, reduce.Max: ncclMax, reduce.Product: ncclMin,
		reduce.Min: ncclMin} {
		if got, err := RedOp(o, reduce.Bool); err != nil || got != w {
			t.Errorf("RedOp(%v, bool) = %d, %v; want %d", o, got, err, w)
		}
	}
	for _, o := range []reduce.Op{reduce.Avg, reduce.BAnd, reduce.BOr, reduce.BXor, reduce.PremulSum} {
		if _, err := RedOp(o, reduce.Bool); !errors.Is(err, backend.ErrUnsupported) {
			t.Errorf("RedOp(%v, bool): %v, want ErrUnsupported", o, err)
		}
	}
}

func TestPremulScalar(t *testing.T) {
	const f = 0.3
	for d, w := range map[reduce.DType]uint64{
		reduce.Float16:  uint64(reduce.Float32ToFloat16(float32(f))),
		reduce.BFloat16: uint64(reduce.Float32ToBFloat16(float32(f))),
		reduce.Float32:  uint64(math.Float32bits(float32(f))),
		reduce.Float64:  math.Float64bits(f),
	} {
		if got, err := scalar(f, d); err != nil || got != w {
			t.Errorf("scalar(%v, %v) = %#x, %v; want %#x", f, d, got, err, w)
		}
	}
	for _, d := range []reduce.DType{reduce.Int8, reduce.Uint8, reduce.Int32, reduce.Int64, reduce.Bool} {
		if _, err := scalar(f, d); !errors.Is(err, backend.ErrUnsupported) {
			t.Errorf("scalar(%v, %v): %v, want ErrUnsupported", f, d, err)
		}
	}
}
