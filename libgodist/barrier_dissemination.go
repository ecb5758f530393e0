package libgodist

// barrierDissemination is the dissemination barrier: in round k every rank sends a token
// to rank+2^k and waits for one from rank-2^k. After ceil(log2 P) rounds
// every rank has heard, directly or not, from every other.
func barrierDissemination(c *comm) error {
	n, r := c.size, c.rank
	token := []byte{1}
	var got [1]byte
	for k, round := 1, uint16(0); k < n; k, round = k<<1, round+1 {
		if err := c.sendRecv((r+k)%n, token, mod(r-k, n), got[:], round); err != nil {
			return err
		}
	}
	return nil
}
