package libgodist

import "github.com/godist/godist/libgodist/transport"

// gather collects every rank's in into root's outs[rank]: each rank sends
// straight to the root, which posts all receives at once.
func gather(c *comm, in []byte, outs [][]byte, root int) error {
	if c.rank != root {
		return c.send(root, 0, in)
	}
	rs := make([]*transport.Recv, 0, c.size-1)
	for i := 0; i < c.size; i++ {
		if i != root {
			rs = append(rs, c.post(i, 0, outs[i]))
		}
	}
	copy(outs[root], in)
	return c.waitAll(rs)
}

// scatter sends root's ins[i] to rank i's out.
func scatter(c *comm, ins [][]byte, out []byte, root int) error {
	if c.rank != root {
		return c.recv(root, 0, out)
	}
	for i := 0; i < c.size; i++ {
		if i != root {
			if err := c.send(i, 0, ins[i]); err != nil {
				return err
			}
		}
	}
	copy(out, ins[root])
	return nil
}
