module github.com/godist/godist

go 1.26

require (
	github.com/NVIDIA/go-nvml v0.13.3-0
	github.com/google/flatbuffers v25.12.19+incompatible
	github.com/stretchr/testify v1.11.1
)

require (
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)
