package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
)

// fakeLibrary is a machine of fakeDevices; init is what Init returns.
type fakeLibrary struct {
	init    nvml.Return
	devices []*fakeDevice
	nvmlErr nvml.Return // what SystemGetNVMLVersion returns
}

func (f *fakeLibrary) Init() nvml.Return     { return f.init }
func (f *fakeLibrary) Shutdown() nvml.Return { return nvml.SUCCESS }
func (f *fakeLibrary) ErrorString(r nvml.Return) string {
	return map[nvml.Return]string{nvml.ERROR_NOT_SUPPORTED: "Not Supported", nvml.ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
		nvml.ERROR_GPU_IS_LOST: "GPU is lost"}[r]
}
func (f *fakeLibrary) SystemGetDriverVersion() (string, nvml.Return) {
	return "580.65.06", nvml.SUCCESS
}
func (f *fakeLibrary) SystemGetCudaDriverVersion() (int, nvml.Return) {
	return 13000, nvml.SUCCESS
}
func (f *fakeLibrary) SystemGetNVMLVersion() (string, nvml.Return) {
	if f.nvmlErr != nvml.SUCCESS {
		return "", f.nvmlErr
	}
	return "13.580.65.06", nvml.SUCCESS
}
func (f *fakeLibrary) DeviceGetCount() (int, nvml.Return) { return len(f.devices), nvml.SUCCESS }
func (f *fakeLibrary) DeviceGetHandleByIndex(i int) (Device, nvml.Return) {
	if f.devices[i] == nil {
		return nil, nvml.ERROR_GPU_IS_LOST
	}
	return f.devices[i], nvml.SUCCESS
}

// fakeDevice is an H100 with links NVLink links, all active, to peer's bus id.
type fakeDevice struct {
	index   int
	bus     string
	peer    string
	links   int
	memFail bool
}

func pciInfo(bus string) nvml.PciInfo {
	var p nvml.PciInfo
	for i := range len(bus) {
		p.BusId[i] = int8(bus[i])
	}
	return p
}

func (d *fakeDevice) GetName() (string, nvml.Return) { return "NVIDIA H100 80GB HBM3", nvml.SUCCESS }
func (d *fakeDevice) GetUUID() (string, nvml.Return) {
	return "GPU-0000000" + string(rune('0'+d.index)), nvml.SUCCESS
}
func (d *fakeDevice) GetPciInfo() (nvml.PciInfo, nvml.Return) { return pciInfo(d.bus), nvml.SUCCESS }
func (d *fakeDevice) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	if d.memFail {
		return nvml.Memory{}, nvml.ERROR_NOT_SUPPORTED
	}
	return nvml.Memory{Total: 80 << 30, Free: 79 << 30, Used: 1 << 30}, nvml.SUCCESS
}
func (d *fakeDevice) GetCudaComputeCapability() (int, int, nvml.Return) { return 9, 0, nvml.SUCCESS }
func (d *fakeDevice) GetNvLinkState(link int) (nvml.EnableState, nvml.Return) {
	if d.links == 0 {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	if link >= d.links {
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	return nvml.FEATURE_ENABLED, nvml.SUCCESS
}
func (d *fakeDevice) GetNvLinkRemotePciInfo(int) (nvml.PciInfo, nvml.Return) {
	return pciInfo(d.peer), nvml.SUCCESS
}
func (d *fakeDevice) GetTopologyCommonAncestor(Device) (nvml.GpuTopologyLevel, nvml.Return) {
	return nvml.TOPOLOGY_NODE, nvml.SUCCESS
}
func (d *fakeDevice) GetP2PStatus(_ Device, c nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
	switch c {
	case nvml.P2P_CAPS_INDEX_ATOMICS:
		return 0, nvml.ERROR_NOT_SUPPORTED
	case nvml.P2P_CAPS_INDEX_NVLINK:
		if d.links == 0 {
			return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
		}
	}
	return nvml.P2P_STATUS_OK, nvml.SUCCESS
}

// reportJSON is what the command prints for lib, decoded.
func reportJSON(t *testing.T, lib Library, args ...string) map[string]any {
	t.Helper()
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run(args, &out, &errOut, func() Library { return lib }), errOut.String())
	var got map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &got), out.String())
	return got
}

func TestTwoGPUs(t *testing.T) {
	lib := &fakeLibrary{devices: []*fakeDevice{
		{index: 0, bus: "00000000:18:00.0", peer: "00000000:2A:00.0", links: 2},
		{index: 1, bus: "00000000:2A:00.0", peer: "00000000:18:00.0", links: 2, memFail: true},
	}}
	got := reportJSON(t, lib)
	require.Equal(t, true, got["available"])
	require.Nil(t, got["reason"])
	require.Equal(t, "libnvidia-ml.so.1", got["library"])
	require.Equal(t, "580.65.06", got["driver_version"])
	require.Equal(t, "13.0", got["cuda_driver_version"])
	require.Equal(t, "13.580.65.06", got["nvml_version"])
	require.Equal(t, 2.0, got["device_count"])
	require.Equal(t, map[string]any{}, got["errors"])

	devices := got["devices"].([]any)
	require.Len(t, devices, 2)
	link := func(n int, peer string) map[string]any {
		return map[string]any{"link": float64(n), "active": true, "remote_pci_bus_id": peer, "error": nil}
	}
	require.Equal(t, map[string]any{
		"index": 0.0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-00000000", "pci_bus_id": "00000000:18:00.0",
		"memory_total": float64(80 << 30), "memory_free": float64(79 << 30), "memory_used": float64(1 << 30),
		"compute_capability": "9.0",
		"nvlink": map[string]any{"supported": true, "count": 2.0, "active": 2.0,
			"links": []any{link(0, "00000000:2A:00.0"), link(1, "00000000:2A:00.0")}},
		"errors": map[string]any{},
	}, devices[0])
	// The failing memory query leaves the memory null and says why; the rest is there.
	d1 := devices[1].(map[string]any)
	require.Nil(t, d1["memory_total"])
	require.Nil(t, d1["memory_free"])
	require.Nil(t, d1["memory_used"])
	require.Equal(t, "GPU-00000001", d1["uuid"])
	require.Equal(t, map[string]any{"memory": "nvmlDeviceGetMemoryInfo: Not Supported (3)"}, d1["errors"])

	require.Equal(t, []any{map[string]any{
		"gpus": []any{0.0, 1.0}, "level": "node", "smi": "NODE",
		"p2p":    map[string]any{"read": "ok", "write": "ok", "nvlink": "ok"},
		"errors": map[string]any{"p2p_atomics": "nvmlDeviceGetP2PStatus(atomics): Not Supported (3)"},
	}}, got["topology"])
}

func TestPCIeGPUsAndALostOne(t *testing.T) {
	lib := &fakeLibrary{nvmlErr: nvml.ERROR_NOT_SUPPORTED, devices: []*fakeDevice{
		{index: 0, bus: "00000000:18:00.0"}, {index: 1, bus: "00000000:2A:00.0"}, nil,
	}}
	got := reportJSON(t, lib, "--pretty")
	require.Equal(t, true, got["available"])
	require.Nil(t, got["nvml_version"])
	require.Equal(t, map[string]any{"nvml_version": "nvmlSystemGetNVMLVersion: Not Supported (3)"}, got["errors"])
	devices := got["devices"].([]any)
	require.Len(t, devices, 3)
	require.Equal(t, map[string]any{"supported": false, "count": 0.0, "active": 0.0, "links": []any{}},
		devices[0].(map[string]any)["nvlink"])
	lost := devices[2].(map[string]any)
	require.Nil(t, lost["name"])
	require.Equal(t, map[string]any{"handle": "nvmlDeviceGetHandleByIndex(2): GPU is lost (15)"}, lost["errors"])

	topo := got["topology"].([]any)
	require.Len(t, topo, 3) // (0,1), (0,2), (1,2)
	require.Equal(t, "not_supported", topo[0].(map[string]any)["p2p"].(map[string]any)["nvlink"])
	require.Equal(t, map[string]any{"gpus": []any{0.0, 2.0}, "level": nil, "smi": nil, "p2p": map[string]any{},
		"errors": map[string]any{"level": "no device handle"}}, topo[1])
}

func TestNoDriver(t *testing.T) {
	want := map[string]any{
		"available": false, "reason": "no NVIDIA driver: libnvidia-ml.so.1 not found", "library": "libnvidia-ml.so.1",
		"driver_version": nil, "cuda_driver_version": nil, "nvml_version": nil, "device_count": nil,
		"devices": []any{}, "topology": []any{}, "errors": map[string]any{},
	}
	require.Equal(t, want, reportJSON(t, &fakeLibrary{init: nvml.ERROR_LIBRARY_NOT_FOUND}))

	got := reportJSON(t, &fakeLibrary{init: nvml.ERROR_DRIVER_NOT_LOADED})
	require.Equal(t, false, got["available"])
	require.Equal(t, "the NVIDIA driver cannot be used: nvmlInit: Driver Not Loaded (9)", got["reason"])
}

// TestRealLibrary runs go-nvml itself: on a host without the driver it must
// answer as TestNoDriver's fake does.
func TestRealLibrary(t *testing.T) {
	got := reportJSON(t, newLibrary())
	if got["available"] == true {
		t.Logf("this host has the NVIDIA driver %v and %v GPUs", got["driver_version"], got["device_count"])
		require.Len(t, got["devices"], int(got["device_count"].(float64)))
		return
	}
	require.NotEmpty(t, got["reason"])
}

func TestUsage(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 2, run([]string{"extra"}, &out, &errOut, newLibrary))
	require.Empty(t, out.String())
	require.Contains(t, errOut.String(), `unexpected argument "extra"`)
	errOut.Reset()
	require.Equal(t, 2, run([]string{"--bogus"}, &out, &errOut, newLibrary))
	require.Contains(t, errOut.String(), "usage: godist-gpuinfo")
	require.Equal(t, 0, run([]string{"--help"}, &out, &errOut, newLibrary))
	require.Empty(t, out.String())
}
