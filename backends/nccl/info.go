package nccl

// Info is what `python -m godist info` reports about the NCCL this
// process can load (godist_nccl_info writes it as JSON).
type Info struct {
	Available      bool   `json:"available"`
	Reason         string `json:"reason,omitempty"`
	Version        string `json:"version,omitempty"`
	VersionCode    int    `json:"version_code,omitempty"`
	RuntimeVersion int    `json:"cuda_runtime_version,omitempty"`
	NCCLFrom       string `json:"nccl_from,omitempty"`
	CUDARTFrom     string `json:"cudart_from,omitempty"`
	Devices        int    `json:"devices"`
	DevicesError   string `json:"devices_error,omitempty"`
	UniqueID       bool   `json:"unique_id"`
	UniqueIDError  string `json:"unique_id_error,omitempty"`
}

// Describe loads NCCL (Load) and reports its version, where it came from,
// the CUDA devices and whether a unique id can be made; what fails is
// said in the Info, not returned.
func Describe() Info {
	var info Info
	lib, err := Load()
	if err != nil {
		info.Reason = err.Error()
		return info
	}
	info.Available = true
	info.Version, info.VersionCode, info.RuntimeVersion = lib.VersionString(), lib.Version, lib.RuntimeVersion
	info.NCCLFrom, info.CUDARTFrom = lib.NCCLFrom, lib.CUDARTFrom
	if n, err := lib.DeviceCount(); err != nil {
		info.DevicesError = err.Error()
	} else {
		info.Devices = n
	}
	if _, err := lib.UniqueID(); err != nil {
		info.UniqueIDError = err.Error()
	} else {
		info.UniqueID = true
	}
	return info
}
