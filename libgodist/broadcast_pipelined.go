package libgodist

import "github.com/godist/godist/libgodist/transport"

// broadcastPipelined is the binomial tree of broadcast_tree.go in which each
// child has a sender goroutine of its own (pipeline.go): a rank sends to
// all its children at once instead of one after the other, and it can cut
// the buffer into segments of seg bytes, forwarding each as soon as it has
// landed while later ones are still arriving (algo.Table.TreeSegment chooses
// seg; the whole buffer is one segment when some host's ranks outnumber
// its cores).
// A rank posts all its receives, then tells its parent (an empty message),
// and a parent sends a child nothing before that: a child still busy with
// the previous op would otherwise get the data as an unexpected message,
// kept and copied twice (page faults and a memmove of several MiB an op
// with 8 ranks).
//
// Over sockets on a host with few cores every copy costs CPU, and the tree
// moves the same P-1 buffers as the one-child-at-a-time version. What
// changes is how many ranks have work: the root feeds its ceil(log2 P)
// children together, so from the start as many ranks copy as the tree has
// edges in use, and each child forwards as soon as its own receive ends
// rather than after its siblings'.
func broadcastPipelined(c *comm, buf []byte, root, seg int) error {
	n := c.size
	vr := (c.rank - root + n) % n
	parent := -1
	mask := 1
	for mask < n {
		if vr&mask != 0 {
			parent = (vr - mask + root) % n
			break
		}
		mask <<= 1
	}
	segs := segments(buf, seg)
	var kids []*sendQueue
	for m := mask >> 1; m > 0; m >>= 1 {
		if vr+m < n {
			kid := (vr + m + root) % n
			kids = append(kids, newGatedSendQueue(c, kid, len(segs), c.post(kid, 1, nil)))
		}
	}
	err := broadcastSegments(c, parent, segs, kids)
	for _, k := range kids {
		if err != nil {
			k.drop()
		}
		if e := k.finish(); err == nil {
			err = e
		}
	}
	return err
}

// broadcastSegments receives segs in order from parent (none for the root)
// and queues each one for every child once it holds it.
func broadcastSegments(c *comm, parent int, segs [][]byte, kids []*sendQueue) error {
	var rs []*transport.Recv
	if parent >= 0 {
		rs = make([]*transport.Recv, len(segs))
		for j, b := range segs {
			rs[j] = c.post(parent, 0, b)
		}
		// Tell the parent: its segments now land straight in buf.
		if err := c.send(parent, 1, nil); err != nil {
			cancelAll(rs, err)
			return err
		}
	}
	for j, b := range segs {
		if rs != nil {
			if err := c.wait(rs[j]); err != nil {
				cancelAll(rs[j+1:], err)
				return err
			}
		}
		for _, k := range kids {
			k.push(0, b)
		}
	}
	return nil
}
