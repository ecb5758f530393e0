package libgodist

// chunks splits count elements of size es into n balanced chunks and
// returns chunk i of buf (i taken modulo n).
type chunks struct {
	buf   []byte
	n     int
	count int
	es    int
}

func (ch chunks) bounds(i int) (int, int) {
	i = ((i % ch.n) + ch.n) % ch.n
	lo := i * ch.count / ch.n
	hi := (i + 1) * ch.count / ch.n
	return lo * ch.es, hi * ch.es
}

func (ch chunks) at(i int) []byte {
	lo, hi := ch.bounds(i)
	return ch.buf[lo:hi]
}

func (ch chunks) max() int { return (ch.count + ch.n - 1) / ch.n * ch.es }

// allReduceRing is a ring reduce-scatter followed by a ring allgather. The
// buffer is cut into P chunks. In step k of the reduce-scatter rank r sends
// chunk r-k to its right neighbour and adds chunk r-k-1 from its left one;
// after P-1 steps rank r holds the full reduction of chunk r+1. The
// allgather then passes the finished chunks around the ring.
//
// Steps: 2(P-1); bytes sent per rank: 2(P-1)/P of the buffer.
func allReduceRing(c *comm, buf []byte, s reduceSpec) error {
	n, r := c.size, c.rank
	ch := chunks{buf: buf, n: n, count: len(buf) / s.dt.Size(), es: s.dt.Size()}
	right, left := (r+1)%n, (r-1+n)%n
	tmp := make([]byte, ch.max())
	for k := 0; k < n-1; k++ {
		rc := ch.at(r - k - 1)
		t := tmp[:len(rc)]
		if err := c.sendRecv(right, ch.at(r-k), left, t, 0); err != nil {
			return err
		}
		if err := s.combine(rc, t); err != nil {
			return err
		}
	}
	for k := 0; k < n-1; k++ {
		if err := c.sendRecv(right, ch.at(r+1-k), left, ch.at(r-k), 1); err != nil {
			return err
		}
	}
	return nil
}
