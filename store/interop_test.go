package store

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// interopTimeout bounds each interop case, Python start-up included.
const interopTimeout = 90 * time.Second

// pyPeer is a running testdata/interop.py.
type pyPeer struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr *syncBuffer
	done   chan error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// torchPython returns $GODIST_TEST_PYTHON if it can import torch.distributed,
// else skips the test.
func torchPython(t *testing.T) string {
	py := os.Getenv("GODIST_TEST_PYTHON")
	if py == "" {
		t.Skip("GODIST_TEST_PYTHON is not set (a python with torch)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, py, "-c", "import torch.distributed as d; assert d.is_available()").CombinedOutput(); err != nil {
		t.Skipf("GODIST_TEST_PYTHON=%s cannot import torch.distributed: %v\n%s", py, err, out)
	}
	return py
}

// startPeer runs interop.py with args; it is killed when ctx ends.
func startPeer(t *testing.T, ctx context.Context, py string, args ...string) *pyPeer {
	t.Helper()
	cmd := exec.CommandContext(ctx, py, append([]string{filepath.Join("testdata", "interop.py")}, args...)...)
	cmd.WaitDelay = 5 * time.Second
	p := &pyPeer{cmd: cmd, lines: make(chan string, 64), stderr: &syncBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("interop.py %v stderr:\n%s", args, p.stderr.String())
		}
	})
	return p
}

// line returns the next line of output.
func (p *pyPeer) line(t *testing.T, ctx context.Context) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		require.True(t, ok, "interop.py exited early: %s", p.stderr.String())
		return l
	case <-ctx.Done():
		require.FailNow(t, "timed out waiting for interop.py", p.stderr.String())
		return ""
	}
}

// result waits for the peer to exit successfully and decodes its last line.
func (p *pyPeer) result(t *testing.T, ctx context.Context) map[string]any {
	t.Helper()
	var last string
	for l := range p.lines {
		last = l
	}
	select {
	case err := <-p.done:
		require.NoError(t, err, "interop.py failed:\n%s", p.stderr.String())
	case <-ctx.Done():
		require.FailNow(t, "timed out waiting for interop.py to exit", p.stderr.String())
	}
	var r map[string]any
	require.NoError(t, json.Unmarshal([]byte(last), &r), "last line %q", last)
	return r
}

// strs converts a JSON list to []string.
func strs(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

func TestInteropWithTorch(t *testing.T) {
	py := torchPython(t)
	t.Run("torch_client_go_server", func(t *testing.T) { interopTorchClient(t, py) })
	t.Run("torch_process_group_on_go_server", func(t *testing.T) { interopProcessGroup(t, py) })
	for _, backend := range []string{"libuv", "classic"} {
		t.Run("go_client_torch_server/"+backend, func(t *testing.T) { interopTorchServer(t, py, backend) })
	}
	for _, order := range []string{"first", "last"} {
		t.Run("file/torch_closes_"+order, func(t *testing.T) { interopFile(t, py, order) })
	}
}

// interopTorchClient: a Go master (world size 2) and a torch client.
func interopTorchClient(t *testing.T, py string) {
	ctx, cancel := context.WithTimeout(context.Background(), interopTimeout)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	peer := startPeer(t, ctx, py, "tcp-client", "127.0.0.1:"+strconv.Itoa(port))

	// Blocks until the torch client registers under "init/".
	m, err := NewTCPStore(ctx, TCPStoreOptions{Port: port, IsMaster: true, WorldSize: 2,
		Server: ServerOptions{Listener: ln, Logf: t.Logf}, Timeout: 60 * time.Second})
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, m.Set(ctx, "go/hello", []byte("hi")))
	require.NoError(t, m.Wait(ctx, []string{"py/waiting"}))
	require.NoError(t, m.Set(ctx, "go/later", []byte("later")))
	require.NoError(t, m.Wait(ctx, []string{"py/done"}))
	r := peer.result(t, ctx)

	assert.Equal(t, "1", r["get"])
	assert.EqualValues(t, 11, r["add"])
	assert.EqualValues(t, 13, r["add_stoll"])
	assert.Equal(t, "wrong", r["cs_missing_wrong"])
	assert.Equal(t, "first", r["cs_missing_empty"])
	assert.Equal(t, "second", r["cs_match"])
	assert.Equal(t, "second", r["cs_mismatch"])
	assert.Equal(t, true, r["check_true"])
	assert.Equal(t, false, r["check_false"])
	assert.Contains(t, r["wait_timeout"], "DistStoreError: wait timeout after 100ms, keys: /nonexistent key")
	assert.Equal(t, "1", r["after_timeout"])
	assert.Equal(t, "potato", r["append"])
	assert.Equal(t, []string{"x", "y"}, strs(r["multi_get"]))
	assert.Equal(t, true, r["delete"])
	assert.Equal(t, false, r["delete_again"])
	assert.EqualValues(t, 2, r["queue_len"])
	assert.Equal(t, true, r["queue_check"])
	assert.Equal(t, []string{"1", "2"}, strs(r["queue_pop"]))
	assert.Contains(t, r["queue_empty"], "QueueEmptyError")
	assert.Equal(t, "no error", r["barrier"]) // BARRIER (18) on the Go server
	assert.Equal(t, "hi", r["from_go"])
	assert.Equal(t, "later", r["go_later"])
	assert.Contains(t, r["bad_add"], "DistNetworkError")
	assert.Equal(t, "1", r["alive_after_bad_add"])

	// The Go side sees the torch client's writes.
	v, err := m.Get(ctx, "py/ctr")
	require.NoError(t, err)
	assert.Equal(t, "11", string(v))
	v, err = m.Get(ctx, "py/bar")
	require.NoError(t, err)
	assert.Equal(t, "1", string(v))
	keys, err := m.ListKeys(ctx)
	require.NoError(t, err)
	var pyKeys []string
	for _, k := range keys {
		if strings.HasPrefix(k, "py/") {
			pyKeys = append(pyKeys, k)
		}
	}
	slices.Sort(pyKeys)
	assert.Equal(t, []string{"py/a", "py/app", "py/bad", "py/bar", "py/cs", "py/ctr", "py/done", "py/m1", "py/num", "py/waiting"}, pyKeys)
	assert.Subset(t, pyKeys, strs(r["list_keys"]))
	n, err := m.NumKeys(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, n-2, r["num_keys"]) // py/bad and py/done came later
	srv := m.Server()
	srv.mu.Lock()
	assert.Equal(t, "2", string(srv.state.kv[initKey]))
	srv.mu.Unlock()
}

// interopProcessGroup: two torch ranks run init_process_group("gloo") and
// collectives with a Go server as their store (torchrun's agent-store mode).
func interopProcessGroup(t *testing.T, py string) {
	ctx, cancel := context.WithTimeout(context.Background(), interopTimeout)
	defer cancel()
	srv := newTestServer(t, ServerOptions{})
	addr := "127.0.0.1:" + strconv.Itoa(srv.Port())
	const world = 2
	peers := make([]*pyPeer, world)
	for r := range peers {
		peers[r] = startPeer(t, ctx, py, "pg", addr, strconv.Itoa(r), strconv.Itoa(world))
	}
	for r, p := range peers {
		res := p.result(t, ctx)
		assert.EqualValues(t, r, res["rank"])
		assert.EqualValues(t, 3, res["all_reduce"]) // 1 + 2
		assert.Len(t, res["gathered"], world)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	assert.Equal(t, strconv.Itoa(world), string(srv.state.kv[initKey]), "every rank registered")
	var pgKeys int
	for k := range srv.state.kv {
		if strings.HasPrefix(k, "/default_pg/") {
			pgKeys++
		}
	}
	assert.Positive(t, pgKeys, "process-group keys went through the Go server")
}

// interopTorchServer: a torch master (world size 2) and a Go client.
func interopTorchServer(t *testing.T, py, backend string) {
	ctx, cancel := context.WithTimeout(context.Background(), interopTimeout)
	defer cancel()
	peer := startPeer(t, ctx, py, "tcp-server", "127.0.0.1:0", backend)
	first := peer.line(t, ctx)
	portStr, ok := strings.CutPrefix(first, "PORT ")
	require.True(t, ok, "first line %q", first)
	port, err := strconv.Atoi(portStr)
	require.NoError(t, err)
	legacy := backend == "classic"
	c, err := NewTCPStore(ctx, TCPStoreOptions{Port: port, WorldSize: 2, Timeout: 60 * time.Second, LegacyServer: legacy})
	require.NoError(t, err)
	defer c.Close()

	v, err := c.Get(ctx, "py/hello") // WAIT + GET
	require.NoError(t, err)
	assert.Equal(t, "hi", string(v))
	require.NoError(t, c.Set(ctx, "go/set", []byte("v")))
	_, err = c.Add(ctx, "go/ctr", 5)
	require.NoError(t, err)
	n, err := c.Add(ctx, "go/ctr", 6)
	require.NoError(t, err)
	assert.EqualValues(t, 11, n)
	require.NoError(t, c.Set(ctx, "go/num", []byte("12abc")))
	n, err = c.Add(ctx, "go/num", 1)
	require.NoError(t, err)
	assert.EqualValues(t, 13, n)
	for _, tc := range []struct{ exp, des, want string }{
		{"wrong", "new", "wrong"}, {"", "first", "first"}, {"first", "second", "second"}, {"first", "third", "second"},
	} {
		got, err := c.CompareSet(ctx, "go/cs", []byte(tc.exp), []byte(tc.des))
		require.NoError(t, err)
		assert.Equal(t, tc.want, string(got))
	}
	ok, err = c.Check(ctx, []string{"go/set", "go/ctr"})
	require.NoError(t, err)
	assert.True(t, ok)
	ok, err = c.Check(ctx, []string{"go/set", "go/nope"})
	require.NoError(t, err)
	assert.False(t, ok)

	// A wait that times out is cancelled on the torch server; the connection
	// stays in step.
	requireTimeout(t, c.Wait(shortCtx(t), []string{"go/never"}), "go/never")
	c.SetTimeout(0) // torch semantics: fail at once unless present
	requireTimeout(t, c.Wait(context.Background(), []string{"go/never"}), "go/never")
	require.NoError(t, c.Wait(context.Background(), []string{"go/set"}))
	c.SetTimeout(60 * time.Second)

	require.NoError(t, c.Append(ctx, "go/app", []byte("po")))
	require.NoError(t, c.Append(ctx, "go/app", []byte("tato")))
	require.NoError(t, c.MultiSet(ctx, []string{"go/m1", "go/m2"}, [][]byte{[]byte("x"), []byte("y")}))
	vals, err := c.MultiGet(ctx, []string{"go/m2", "go/m1"})
	require.NoError(t, err)
	assert.Equal(t, [][]byte{[]byte("y"), []byte("x")}, vals)
	require.NoError(t, c.Set(ctx, "go/del", []byte("1")))
	del, err := c.DeleteKey(ctx, "go/del")
	require.NoError(t, err)
	assert.True(t, del)
	del, err = c.DeleteKey(ctx, "go/del")
	require.NoError(t, err)
	assert.False(t, del)
	require.NoError(t, c.Set(ctx, "go/bin", []byte{0, 255, 1}))
	require.NoError(t, Barrier(ctx, c, "go/bar", 1))

	if legacy {
		require.ErrorIs(t, c.QueuePush(ctx, "go/q", []byte("1")), ErrNotSupported)
	} else {
		require.NoError(t, c.QueuePush(ctx, "go/q", []byte("1")))
		require.NoError(t, c.QueuePush(ctx, "go/q", []byte("2")))
		ql, err := c.QueueLen(ctx, "go/q")
		require.NoError(t, err)
		assert.EqualValues(t, 2, ql)
		v, err := c.QueuePop(ctx, "go/q", true)
		require.NoError(t, err)
		assert.Equal(t, "1", string(v))
	}

	// ADD on a non-numeric value makes torch's server drop that connection;
	// the Go client reconnects on its next operation.
	cl, err := c.Clone(ctx)
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, cl.Set(ctx, "go/bad", []byte("abc")))
	_, err = cl.Add(ctx, "go/bad", 1)
	require.ErrorIs(t, err, ErrConnLost)
	v, err = cl.Get(ctx, "go/bad")
	require.NoError(t, err)
	assert.Equal(t, "abc", string(v))

	keys, err := c.ListKeys(ctx)
	require.NoError(t, err)
	var goKeys []string
	for _, k := range keys {
		if strings.HasPrefix(k, "go/") {
			goKeys = append(goKeys, k)
		}
	}
	assert.Contains(t, goKeys, "go/bar/last_member")
	assert.NotContains(t, keys, "init/")
	num, err := c.NumKeys(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, len(keys)+1, num) // + "init/"

	require.NoError(t, c.Set(ctx, "go/done", []byte("1")))
	v, err = c.Get(ctx, "py/done")
	require.NoError(t, err)
	assert.Equal(t, "1", string(v))
	require.NoError(t, c.Set(ctx, "go/bye", []byte("1")))
	r := peer.result(t, ctx)

	assert.Equal(t, backend == "libuv", r["libuv"])
	assert.Equal(t, "v", r["go_set"])
	assert.Equal(t, "11", r["go_ctr"])
	assert.Equal(t, "potato", r["go_append"])
	assert.Equal(t, []string{"x", "y"}, strs(r["go_multi"]))
	assert.Equal(t, false, r["go_deleted"])
	assert.Equal(t, []any{0.0, 255.0, 1.0}, r["go_binary"])
	want := append(goKeys, "go/done")
	slices.Sort(want)
	assert.Equal(t, want, strs(r["list_keys"]))
	if !legacy {
		assert.EqualValues(t, 1, r["go_queue_len"])
		assert.Equal(t, "2", r["go_queue_pop"])
	}
}

// interopFile: torch's and godist's FileStore on one file, world size 2.
func interopFile(t *testing.T, py, order string) {
	ctx, cancel := context.WithTimeout(context.Background(), interopTimeout)
	defer cancel()
	path := filepath.Join(t.TempDir(), "filestore")
	peer := startPeer(t, ctx, py, "file", path, order)
	f, err := NewFileStore(ctx, path, 2)
	require.NoError(t, err)
	defer f.Close()
	f.SetTimeout(60 * time.Second)

	require.NoError(t, f.Set(ctx, "go/set", []byte("v")))
	_, err = f.Add(ctx, "go/ctr", 5)
	require.NoError(t, err)
	_, err = f.Add(ctx, "go/ctr", 6)
	require.NoError(t, err)
	require.NoError(t, f.Append(ctx, "go/app", []byte("po")))
	require.NoError(t, f.Append(ctx, "go/app", []byte("tato")))
	require.NoError(t, f.MultiSet(ctx, []string{"go/m1", "go/m2"}, [][]byte{[]byte("x"), []byte("y")}))
	require.NoError(t, f.Set(ctx, "go/del", []byte("1")))
	_, err = f.DeleteKey(ctx, "go/del")
	require.NoError(t, err)
	v, err := f.Get(ctx, "py/a") // written by torch
	require.NoError(t, err)
	assert.Equal(t, "1", string(v))
	require.NoError(t, f.Wait(ctx, []string{"py/ctr"}))
	n, err := f.Add(ctx, "py/ctr", 1) // torch added 5
	require.NoError(t, err)
	assert.EqualValues(t, 6, n)
	require.NoError(t, f.Set(ctx, "go/done", []byte("1")))
	require.NoError(t, f.Wait(ctx, []string{"py/done"}))

	var r map[string]any
	if order == "first" {
		r = peer.result(t, ctx) // torch closed: refcount 1, cleanup 1
		require.FileExists(t, path)
		assert.Equal(t, true, r["file_exists_after_close"])
		require.NoError(t, f.Close()) // last closer removes the file
	} else {
		require.NoError(t, f.Close()) // torch is still open
		r = peer.result(t, ctx)       // torch closed last and removed it
		assert.Equal(t, false, r["file_exists_after_close"])
	}
	assert.NoFileExists(t, path)
	assert.Equal(t, "v", r["go_set"])
	assert.Equal(t, "11", r["go_ctr"])
	assert.Equal(t, "potato", r["go_append"])
	assert.Equal(t, []string{"x", "y"}, strs(r["go_multi"]))
	assert.Equal(t, false, r["go_deleted"])
	assert.EqualValues(t, 6, r["py_ctr_after_go"])
	assert.EqualValues(t, 9, r["num_keys"]) // refcount/ + 8 keys
	assert.Equal(t, []string{"efcount/", "go/app", "go/ctr", "go/done", "go/m1", "go/m2", "go/set", "py/a", "py/ctr"}, strs(r["list_keys"]))
}
