package main

import "github.com/NVIDIA/go-nvml/pkg/nvml"

// nvmlLibrary is the Library of go-nvml, which opens libnvidia-ml.so.1
// with dlopen at Init: the command starts, and reports, without it.
type nvmlLibrary struct {
	nvml.Interface
}

func newLibrary() Library {
	return nvmlLibrary{nvml.New()}
}

func (l nvmlLibrary) DeviceGetHandleByIndex(i int) (Device, nvml.Return) {
	d, ret := l.Interface.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	return nvmlDevice{d}, ret
}

// nvmlDevice is a go-nvml device as a Device.
type nvmlDevice struct {
	nvml.Device
}

func (d nvmlDevice) GetTopologyCommonAncestor(other Device) (nvml.GpuTopologyLevel, nvml.Return) {
	return d.Device.GetTopologyCommonAncestor(other.(nvmlDevice).Device)
}

func (d nvmlDevice) GetP2PStatus(other Device, idx nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
	return d.Device.GetP2PStatus(other.(nvmlDevice).Device, idx)
}
