package wire

// The FlatBuffers code under fb/ is generated from godist.fbs and committed.
// Regenerate it with `go generate ./libgodist/wire/` after editing the
// schema; this needs flatc (Debian: apt-get install flatbuffers-compiler,
// tested with flatc 2.0.8, whose Go output works with the
// github.com/google/flatbuffers v25 runtime). The second step keeps the
// generated code gofmt-clean.

//go:generate flatc --go --go-namespace fb -o . godist.fbs
//go:generate gofmt -w fb
