package main

import (
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlLibraryName is the library go-nvml opens at Init.
const nvmlLibraryName = "libnvidia-ml.so.1"

// Library is the part of NVML the report reads. newLibrary wraps go-nvml;
// tests give a fake.
type Library interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	ErrorString(nvml.Return) string
	SystemGetDriverVersion() (string, nvml.Return)
	SystemGetCudaDriverVersion() (int, nvml.Return)
	SystemGetNVMLVersion() (string, nvml.Return)
	DeviceGetCount() (int, nvml.Return)
	DeviceGetHandleByIndex(int) (Device, nvml.Return)
}

// Device is the part of an NVML device handle the report reads. The Device
// given to GetTopologyCommonAncestor and GetP2PStatus is one the same
// Library returned.
type Device interface {
	GetName() (string, nvml.Return)
	GetUUID() (string, nvml.Return)
	GetPciInfo() (nvml.PciInfo, nvml.Return)
	GetMemoryInfo() (nvml.Memory, nvml.Return)
	GetCudaComputeCapability() (int, int, nvml.Return)
	GetNvLinkState(link int) (nvml.EnableState, nvml.Return)
	GetNvLinkRemotePciInfo(link int) (nvml.PciInfo, nvml.Return)
	GetTopologyCommonAncestor(Device) (nvml.GpuTopologyLevel, nvml.Return)
	GetP2PStatus(Device, nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return)
}

// Report is the JSON the command prints. Values NVML could not give are
// null, with the failing call's error under errors[field].
type Report struct {
	Available         bool              `json:"available"`
	Reason            *string           `json:"reason"`
	Library           string            `json:"library"`
	DriverVersion     *string           `json:"driver_version"`
	CudaDriverVersion *string           `json:"cuda_driver_version"`
	NVMLVersion       *string           `json:"nvml_version"`
	DeviceCount       *int              `json:"device_count"`
	Devices           []GPU             `json:"devices"`
	Topology          []Link            `json:"topology"`
	Errors            map[string]string `json:"errors"`
}

// GPU is one device of the report.
type GPU struct {
	Index             int               `json:"index"`
	Name              *string           `json:"name"`
	UUID              *string           `json:"uuid"`
	PCIBusID          *string           `json:"pci_bus_id"`
	MemoryTotal       *uint64           `json:"memory_total"`
	MemoryFree        *uint64           `json:"memory_free"`
	MemoryUsed        *uint64           `json:"memory_used"`
	ComputeCapability *string           `json:"compute_capability"`
	NVLink            NVLink            `json:"nvlink"`
	Errors            map[string]string `json:"errors"`
}

// NVLink is a GPU's NVLink links: those NVML reports a state for.
type NVLink struct {
	Supported bool         `json:"supported"`
	Count     int          `json:"count"`
	Active    int          `json:"active"`
	Links     []NVLinkLink `json:"links"`
}

// NVLinkLink is one link: whether it is up and the PCI bus id at its far end.
type NVLinkLink struct {
	Link           int     `json:"link"`
	Active         bool    `json:"active"`
	RemotePCIBusID *string `json:"remote_pci_bus_id"`
	Error          *string `json:"error"`
}

// Link is what NVML says about one pair of GPUs (a < b).
type Link struct {
	GPUs   [2]int            `json:"gpus"`
	Level  *string           `json:"level"`
	SMI    *string           `json:"smi"`
	P2P    map[string]string `json:"p2p"`
	Errors map[string]string `json:"errors"`
}

// Topology levels by name, and as nvidia-smi topo -m abbreviates them.
var levelNames = map[nvml.GpuTopologyLevel][2]string{
	nvml.TOPOLOGY_INTERNAL:   {"internal", "X"},
	nvml.TOPOLOGY_SINGLE:     {"single", "PIX"},
	nvml.TOPOLOGY_MULTIPLE:   {"multiple", "PXB"},
	nvml.TOPOLOGY_HOSTBRIDGE: {"hostbridge", "PHB"},
	nvml.TOPOLOGY_NODE:       {"node", "NODE"},
	nvml.TOPOLOGY_SYSTEM:     {"system", "SYS"},
}

var p2pStatusNames = map[nvml.GpuP2PStatus]string{
	nvml.P2P_STATUS_OK:                         "ok",
	nvml.P2P_STATUS_CHIPSET_NOT_SUPPORTED:      "chipset_not_supported",
	nvml.P2P_STATUS_GPU_NOT_SUPPORTED:          "gpu_not_supported",
	nvml.P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED: "ioh_topology_not_supported",
	nvml.P2P_STATUS_DISABLED_BY_REGKEY:         "disabled_by_regkey",
	nvml.P2P_STATUS_NOT_SUPPORTED:              "not_supported",
	nvml.P2P_STATUS_UNKNOWN:                    "unknown",
}

// The P2P capabilities asked about, in order.
var p2pCaps = []struct {
	name string
	idx  nvml.GpuP2PCapsIndex
}{
	{"read", nvml.P2P_CAPS_INDEX_READ},
	{"write", nvml.P2P_CAPS_INDEX_WRITE},
	{"nvlink", nvml.P2P_CAPS_INDEX_NVLINK},
	{"atomics", nvml.P2P_CAPS_INDEX_ATOMICS},
}

func ptr[T any](v T) *T { return &v }

// cString is a NUL-terminated C char array as a Go string.
func cString(b []int8) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

// cudaVersion formats NVML's CUDA version number (1000*major + 10*minor).
func cudaVersion(v int) string {
	return fmt.Sprintf("%d.%d", v/1000, v%1000/10)
}

// Build asks lib about the machine's GPUs. It never fails: a library that
// is absent or will not initialise gives available=false and a reason, and
// a query that fails leaves its field null and its error in errors.
func Build(lib Library) Report {
	r := Report{Library: nvmlLibraryName, Devices: []GPU{}, Topology: []Link{}, Errors: map[string]string{}}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			r.Reason = ptr("no NVIDIA driver: " + nvmlLibraryName + " not found")
		} else {
			r.Reason = ptr("the NVIDIA driver cannot be used: " + errText(lib, "nvmlInit", ret))
		}
		return r
	}
	defer lib.Shutdown()

	r.Available = true
	if v, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		r.DriverVersion = &v
	} else {
		r.Errors["driver_version"] = errText(lib, "nvmlSystemGetDriverVersion", ret)
	}
	if v, ret := lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		r.CudaDriverVersion = ptr(cudaVersion(v))
	} else {
		r.Errors["cuda_driver_version"] = errText(lib, "nvmlSystemGetCudaDriverVersion", ret)
	}
	if v, ret := lib.SystemGetNVMLVersion(); ret == nvml.SUCCESS {
		r.NVMLVersion = &v
	} else {
		r.Errors["nvml_version"] = errText(lib, "nvmlSystemGetNVMLVersion", ret)
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		r.Errors["device_count"] = errText(lib, "nvmlDeviceGetCount", ret)
		r.Reason = ptr("cannot count the GPUs: " + r.Errors["device_count"])
		return r
	}
	r.DeviceCount = &n

	handles := make([]Device, n) // nil where the handle could not be had
	for i := range n {
		g := GPU{Index: i, NVLink: NVLink{Links: []NVLinkLink{}}, Errors: map[string]string{}}
		if d, ret := lib.DeviceGetHandleByIndex(i); ret == nvml.SUCCESS {
			handles[i] = d
			describe(lib, &g, d)
		} else {
			g.Errors["handle"] = errText(lib, fmt.Sprintf("nvmlDeviceGetHandleByIndex(%d)", i), ret)
		}
		r.Devices = append(r.Devices, g)
	}
	for a := range n {
		for b := a + 1; b < n; b++ {
			r.Topology = append(r.Topology, pair(lib, a, b, handles[a], handles[b]))
		}
	}
	return r
}

// errText names a failed call and NVML's description of its error.
func errText(lib Library, call string, ret nvml.Return) string {
	return fmt.Sprintf("%s: %s (%d)", call, lib.ErrorString(ret), int32(ret))
}

// describe fills g from its device handle d.
func describe(lib Library, g *GPU, d Device) {
	if v, ret := d.GetName(); ret == nvml.SUCCESS {
		g.Name = &v
	} else {
		g.Errors["name"] = errText(lib, "nvmlDeviceGetName", ret)
	}
	if v, ret := d.GetUUID(); ret == nvml.SUCCESS {
		g.UUID = &v
	} else {
		g.Errors["uuid"] = errText(lib, "nvmlDeviceGetUUID", ret)
	}
	if v, ret := d.GetPciInfo(); ret == nvml.SUCCESS {
		g.PCIBusID = ptr(cString(v.BusId[:]))
	} else {
		g.Errors["pci_bus_id"] = errText(lib, "nvmlDeviceGetPciInfo", ret)
	}
	if m, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
		g.MemoryTotal, g.MemoryFree, g.MemoryUsed = &m.Total, &m.Free, &m.Used
	} else {
		g.Errors["memory"] = errText(lib, "nvmlDeviceGetMemoryInfo", ret)
	}
	if major, minor, ret := d.GetCudaComputeCapability(); ret == nvml.SUCCESS {
		g.ComputeCapability = ptr(fmt.Sprintf("%d.%d", major, minor))
	} else {
		g.Errors["compute_capability"] = errText(lib, "nvmlDeviceGetCudaComputeCapability", ret)
	}
	for link := range nvml.NVLINK_MAX_LINKS {
		state, ret := d.GetNvLinkState(link)
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue // no NVLink on this GPU, or no link of this number
		}
		l := NVLinkLink{Link: link}
		if ret != nvml.SUCCESS {
			l.Error = ptr(errText(lib, "nvmlDeviceGetNvLinkState", ret))
		} else if l.Active = state == nvml.FEATURE_ENABLED; l.Active {
			g.NVLink.Active++
			if pci, ret := d.GetNvLinkRemotePciInfo(link); ret == nvml.SUCCESS {
				l.RemotePCIBusID = ptr(cString(pci.BusId[:]))
			} else {
				l.Error = ptr(errText(lib, "nvmlDeviceGetNvLinkRemotePciInfo", ret))
			}
		}
		g.NVLink.Links = append(g.NVLink.Links, l)
	}
	g.NVLink.Count = len(g.NVLink.Links)
	g.NVLink.Supported = g.NVLink.Count > 0
}

// pair describes GPUs a and b from their handles (nil: none).
func pair(lib Library, a, b int, da, db Device) Link {
	l := Link{GPUs: [2]int{a, b}, P2P: map[string]string{}, Errors: map[string]string{}}
	if da == nil || db == nil {
		l.Errors["level"] = "no device handle"
		return l
	}
	if lv, ret := da.GetTopologyCommonAncestor(db); ret == nvml.SUCCESS {
		if names, ok := levelNames[lv]; ok {
			l.Level, l.SMI = ptr(names[0]), ptr(names[1])
		} else {
			l.Level = ptr(fmt.Sprintf("level %d", lv))
		}
	} else {
		l.Errors["level"] = errText(lib, "nvmlDeviceGetTopologyCommonAncestor", ret)
	}
	for _, c := range p2pCaps {
		st, ret := da.GetP2PStatus(db, c.idx)
		if ret != nvml.SUCCESS {
			l.Errors["p2p_"+c.name] = errText(lib, "nvmlDeviceGetP2PStatus("+c.name+")", ret)
			continue
		}
		if name, ok := p2pStatusNames[st]; ok {
			l.P2P[c.name] = name
		} else {
			l.P2P[c.name] = fmt.Sprintf("status %d", st)
		}
	}
	return l
}
