package mpi

// Info describes the MPI a Lib drives, as godist_mpi_open reports it
// (JSON, read by python/godist/_mpi.py).
type Info struct {
	Impl                string `json:"impl"`
	Shim                string `json:"shim"`
	Library             string `json:"library"`
	Version             string `json:"version"`
	Provided            int    `json:"provided"`
	ProvidedName        string `json:"provided_name"`
	InitializedByGodist bool   `json:"initialized_by_godist"`
	Rank                int    `json:"rank"`
	Size                int    `json:"size"`
	TagUB               int    `json:"tag_ub"`
	ProcessorName       string `json:"processor_name"`
}

// Info describes l.
func (l *Lib) Info() Info {
	return Info{Impl: l.Impl, Shim: l.Shim, Library: l.Library, Version: l.Version, Provided: l.Provided,
		ProvidedName: l.ProvidedName, InitializedByGodist: l.InitializedByGodist, Rank: l.WorldRank,
		Size: l.WorldSize, TagUB: l.TagUB, ProcessorName: l.ProcessorName}
}
