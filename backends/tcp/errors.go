package tcp

import "errors"

var (
	// errCorrupt is wrapped when a peer sends bytes that are not a frame.
	errCorrupt = errors.New("tcp: corrupt frame")
	// errHandshake is wrapped when a new connection's handshake is rejected.
	errHandshake = errors.New("tcp: handshake rejected")
)
