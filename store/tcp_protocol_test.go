package store

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func hexBytes(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func u64le(n uint64) []byte { return binary.LittleEndian.AppendUint64(nil, n) }

// TestWireExamples checks the byte layouts given in the reference (§1.3, §1.4).
func TestWireExamples(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		req  request
		want []byte
	}{
		{"validate", rqValidate(), []byte{0x00, 0xCE, 0xF7, 0x85, 0x3C}},
		{"ping", request{cmd: cmdPing, u32: 0x01020304}, []byte{0x0D, 0x04, 0x03, 0x02, 0x01}},
		{"set_foo_bar", rqSet("/foo", "bar"), hexBytes([]byte{1}, u64le(4), []byte("/foo"), u64le(3), []byte("bar"))},
		{"wait_a_b", rqKeys(cmdWait, "/a", "/b"), hexBytes([]byte{6}, u64le(2), u64le(2), []byte("/a"), u64le(2), []byte("/b"))},
		{"add_init", rqAdd(initKey, 1), hexBytes([]byte{4}, u64le(5), []byte("init/"), u64le(1))},
		{"add_negative", rqAdd("/k", -1), hexBytes([]byte{4}, u64le(2), []byte("/k"), u64le(^uint64(0)))},
		{"compare_set", rqCS("/k", "e", "dd"), hexBytes([]byte{2}, u64le(2), []byte("/k"), u64le(1), []byte("e"), u64le(2), []byte("dd"))},
		{"multi_set", rqMultiSet([]string{"/a"}, "v"), hexBytes([]byte{11}, u64le(1), u64le(2), []byte("/a"), u64le(1), []byte("v"))},
		{"cancel_wait", rqBare(cmdCancelWait), []byte{12}},
		{"list_keys", rqBare(cmdListKeys), []byte{17}},
		{"barrier", rqBarrier("/b", 4), hexBytes([]byte{18}, u64le(2), []byte("/b"), u64le(4))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, appendRequest(nil, tc.req))
		})
	}
}

// allRequests is one request of every command.
func allRequests() []request {
	return []request{
		rqValidate(),
		rqSet("/k", "v"),
		rqCS("/k", "", "d"),
		rqKey(cmdGet, "/k"),
		rqAdd("/k", -42),
		rqKeys(cmdCheck, "/a", "/b"),
		rqKeys(cmdWait, "/a"),
		rqBare(cmdGetNumKeys),
		rqKey(cmdDeleteKey, "/k"),
		rqAppend("/k", "more"),
		rqKeys(cmdMultiGet, "/a", "", "/c"),
		rqMultiSet([]string{"/a", "/b"}, "1", ""),
		rqBare(cmdCancelWait),
		{cmd: cmdPing, u32: 7},
		rqPush("/q", "x"),
		rqKey(cmdQueuePop, "/q"),
		rqKey(cmdQueueLen, "/q"),
		rqBare(cmdListKeys),
		rqBarrier("/b", 3),
	}
}

func TestRequestRoundTrip(t *testing.T) {
	t.Parallel()
	var stream []byte
	reqs := allRequests()
	for _, r := range reqs {
		stream = appendRequest(stream, r)
	}
	// Whole stream, and the same stream delivered one byte per read (split
	// messages must be reassembled).
	for name, r := range map[string]io.Reader{"whole": bytes.NewReader(stream), "one_byte_reads": iotest.OneByteReader(bytes.NewReader(stream))} {
		t.Run(name, func(t *testing.T) {
			br := bufio.NewReaderSize(r, 16)
			for i, want := range reqs {
				got, err := readRequest(br, defaultLimits)
				require.NoError(t, err, "request %d", i)
				assert.Equal(t, appendRequest(nil, want), appendRequest(nil, got), "request %d (%v)", i, want.cmd)
				assert.Equal(t, want.cmd, got.cmd)
			}
			_, err := readRequest(br, defaultLimits)
			assert.ErrorIs(t, err, io.EOF)
		})
	}
}

func TestRequestDecodeErrors(t *testing.T) {
	t.Parallel()
	small := limits{maxKeyLen: 4, maxValueLen: 8, maxKeys: 2, maxRequest: 48}
	tests := []struct {
		name string
		in   []byte
	}{
		{"unknown_command", []byte{19}},
		{"unknown_command_ff", []byte{0xFF, 0, 0}},
		{"key_too_long", hexBytes([]byte{3}, u64le(5), []byte("/abcd"))},
		{"key_length_huge", hexBytes([]byte{3}, u64le(1<<62))},
		{"value_too_long", hexBytes([]byte{1}, u64le(2), []byte("/k"), u64le(9))},
		{"too_many_keys", hexBytes([]byte{5}, u64le(3))},
		{"request_too_big", hexBytes([]byte{11}, u64le(2),
			u64le(2), []byte("/a"), u64le(8), bytes.Repeat([]byte("x"), 8),
			u64le(2), []byte("/b"), u64le(8), bytes.Repeat([]byte("x"), 8),
		)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readRequest(bufio.NewReader(bytes.NewReader(tc.in)), small)
			require.ErrorIs(t, err, ErrProtocol)
		})
	}
	t.Run("truncated_everywhere", func(t *testing.T) {
		for _, r := range allRequests() {
			enc := appendRequest(nil, r)
			for n := 1; n < len(enc); n++ {
				_, err := readRequest(bufio.NewReader(bytes.NewReader(enc[:n])), defaultLimits)
				require.ErrorIs(t, err, ErrProtocol, "%v cut at %d", r.cmd, n)
			}
		}
	})
	t.Run("empty_is_eof", func(t *testing.T) {
		_, err := readRequest(bufio.NewReader(bytes.NewReader(nil)), defaultLimits)
		require.ErrorIs(t, err, io.EOF)
		assert.NotErrorIs(t, err, ErrProtocol)
	})
	t.Run("reply_decoder_keeps_eof", func(t *testing.T) {
		_, err := newReplyDecoder(bufio.NewReader(bytes.NewReader([]byte{1, 2}))).i64()
		require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	})
}

func TestCommandNames(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "VALIDATE", cmdValidate.String())
	assert.Equal(t, "BARRIER", cmdBarrier.String())
	assert.Equal(t, "command(200)", command(200).String())
	for c := range command(numCommands) {
		assert.NotEmpty(t, c.String())
	}
}

func TestParseStoll(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want int64
		bad  bool
	}{
		{"0", 0, false}, {"42", 42, false}, {"-42", -42, false}, {"+7", 7, false},
		{"  \n\t12", 12, false}, {"12abc", 12, false}, {"0x10", 0, false}, {"007", 7, false},
		{"9223372036854775807", 1<<63 - 1, false}, {"-9223372036854775808", -1 << 63, false},
		{"9223372036854775808", 0, true}, {"", 0, true}, {" ", 0, true}, {"-", 0, true},
		{"+-1", 0, true}, {"abc", 0, true}, {"\x00", 0, true},
	}
	for _, tc := range tests {
		got, err := parseStoll([]byte(tc.in))
		if tc.bad {
			assert.ErrorIs(t, err, ErrInvalid, "%q", tc.in)
			continue
		}
		require.NoError(t, err, "%q", tc.in)
		assert.Equal(t, tc.want, got, "%q", tc.in)
	}
}
