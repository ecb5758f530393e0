package nccl

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The tests here check what shim.c and calls.go declare by hand against
// the nccl.h of the nvidia-nccl wheel that the development virtual
// environment holds (requirements-dev.txt installs torch, which pulls it
// in), and load that wheel's libnccl.so.2 and libcudart.so.13.

// wheelSitePackages returns the site-packages folder of the first virtual
// environment that has the nvidia-nccl wheel: $GODIST_TEST_VENV (the
// Makefile sets it to its VENV), else .venv* at the repository root.
func wheelSitePackages() string {
	var venvs []string
	if v := os.Getenv("GODIST_TEST_VENV"); v != "" {
		venvs = append(venvs, v)
	}
	if m, _ := filepath.Glob(filepath.Join("..", "..", ".venv*")); len(m) > 0 {
		venvs = append(venvs, m...) // sorted: .venv before .venv-torch*
	}
	for _, v := range venvs {
		m, _ := filepath.Glob(filepath.Join(v, "lib", "python3*", "site-packages", "nvidia", "nccl", "include", "nccl.h"))
		if len(m) > 0 {
			return filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(m[0]))))
		}
	}
	return ""
}

var sitePackages = wheelSitePackages()

// wheelLoaded is set by TestMain when it pointed Load at the wheel's
// libraries.
var wheelLoaded bool

func TestMain(m *testing.M) {
	// Load runs once per process: point it at the wheel before any test
	// can call it, so that every test sees the same library.
	// GODIST_NCCL_LIBRARY and GODIST_CUDART_LIBRARY, as the library reads
	// them (assemble.Configure), else the wheel's.
	c := Config{NCCLLibrary: os.Getenv("GODIST_NCCL_LIBRARY"), CUDARTLibrary: os.Getenv("GODIST_CUDART_LIBRARY")}
	if sitePackages != "" && c == (Config{}) {
		n := filepath.Join(sitePackages, "nvidia", "nccl", "lib", "libnccl.so.2")
		r := filepath.Join(sitePackages, "nvidia", "cu13", "lib", "libcudart.so.13")
		if fileExists(n) && fileExists(r) {
			c = Config{NCCLLibrary: n, CUDARTLibrary: r}
			wheelLoaded = true
		}
	}
	Configure(c)
	os.Exit(m.Run())
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// ncclHeader returns the wheel's nccl.h with its comments removed.
func ncclHeader(t *testing.T) string {
	t.Helper()
	if sitePackages == "" {
		t.Skip("no nvidia-nccl wheel: no .venv*/lib/python3*/site-packages/nvidia/nccl/include/nccl.h at the " +
			"repository root and GODIST_TEST_VENV unset (make venv installs it)")
	}
	b, err := os.ReadFile(filepath.Join(sitePackages, "nvidia", "nccl", "include", "nccl.h"))
	if err != nil {
		t.Fatal(err)
	}
	return stripComments(string(b))
}

var (
	blockComment = regexp.MustCompile(`(?s)/\*.*?\*/`)
	lineComment  = regexp.MustCompile(`//[^\n]*`)
)

func stripComments(s string) string {
	return lineComment.ReplaceAllString(blockComment.ReplaceAllString(s, " "), "")
}

// enumValues parses `typedef enum { a = 1, b = 2 } name;` into its
// constants with plain decimal values.
func enumValues(t *testing.T, src, name string) map[string]int {
	t.Helper()
	re := regexp.MustCompile(`(?s)typedef\s+enum\s*\{([^}]*)\}\s*` + regexp.QuoteMeta(name) + `\s*;`)
	m := re.FindStringSubmatch(src)
	if m == nil {
		t.Fatalf("nccl.h: no enum %s", name)
	}
	out := map[string]int{}
	for _, kv := range regexp.MustCompile(`(\w+)\s*=\s*(-?\d+)\s*(?:,|$)`).FindAllStringSubmatch(m[1]+",", -1) {
		v, err := strconv.Atoi(kv[2])
		if err != nil {
			t.Fatalf("%s: %s = %s: %v", name, kv[1], kv[2], err)
		}
		out[kv[1]] = v
	}
	return out
}

// defineValue returns the integer value of #define name in src.
func defineValue(t *testing.T, src, name string) int64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\s*#define\s+` + regexp.QuoteMeta(name) + `\s+(\S+)`).FindStringSubmatch(src)
	if m == nil {
		t.Fatalf("no #define %s", name)
	}
	v, err := strconv.ParseInt(m[1], 0, 64)
	if err != nil {
		t.Fatalf("#define %s %s: %v", name, m[1], err)
	}
	return v
}

// structFields returns the "type name" declarations of a struct body, in
// order, with whitespace normalized.
func structFields(body string) []string {
	var out []string
	for _, decl := range strings.Split(body, ";") {
		decl = strings.Join(strings.Fields(decl), " ")
		decl = strings.ReplaceAll(decl, "* ", "*")
		if decl != "" {
			out = append(out, decl)
		}
	}
	return out
}

func TestHeaderTypesAndOps(t *testing.T) {
	h := ncclHeader(t)
	types := enumValues(t, h, "ncclDataType_t")
	redOps := enumValues(t, h, "ncclRedOp_t")
	for name, got := range map[string]int{
		"ncclInt8": ncclInt8, "ncclUint8": ncclUint8, "ncclInt32": ncclInt32, "ncclUint32": ncclUint32,
		"ncclInt64": ncclInt64, "ncclUint64": ncclUint64, "ncclFloat16": ncclFloat16, "ncclFloat32": ncclFloat32,
		"ncclFloat64": ncclFloat64, "ncclBfloat16": ncclBfloat16,
	} {
		want, ok := types[name]
		if !ok {
			t.Errorf("nccl.h's ncclDataType_t has no %s", name)
		} else if got != want {
			t.Errorf("calls.go: %s = %d, nccl.h says %d", name, got, want)
		}
	}
	for name, got := range map[string]int{
		"ncclSum": ncclSum, "ncclProd": ncclProd, "ncclMax": ncclMax, "ncclMin": ncclMin, "ncclAvg": ncclAvg,
	} {
		want, ok := redOps[name]
		if !ok {
			t.Errorf("nccl.h's ncclRedOp_t has no %s", name)
		} else if got != want {
			t.Errorf("calls.go: %s = %d, nccl.h says %d", name, got, want)
		}
	}
	// Every NCCL code the dtype table hands out is one of the header's.
	codes := map[int]bool{}
	for _, v := range types {
		codes[v] = true
	}
	for d, v := range dtypes {
		if !codes[int(v)] {
			t.Errorf("dtypes[%v] = %d, not an ncclDataType_t", d, v)
		}
	}
	for o, v := range ops {
		if v < 0 || int(v) >= redOps["ncclNumOps"] {
			t.Errorf("ops[%v] = %d, not a built-in ncclRedOp_t", o, v)
		}
	}
}

func TestHeaderResultsAndConfig(t *testing.T) {
	h := ncclHeader(t)
	shimC, err := os.ReadFile("shim.c")
	if err != nil {
		t.Fatal(err)
	}
	shimH, err := os.ReadFile("shim.h")
	if err != nil {
		t.Fatal(err)
	}
	shim := stripComments(string(shimC))

	results := enumValues(t, h, "ncclResult_t")
	if want, ok := results["ncclInProgress"]; !ok {
		t.Error("nccl.h's ncclResult_t has no ncclInProgress")
	} else if got := defineValue(t, shim, "NCCL_IN_PROGRESS"); got != int64(want) {
		t.Errorf("shim.c: NCCL_IN_PROGRESS = %d, nccl.h's ncclInProgress = %d", got, want)
	} else if want != 7 {
		t.Errorf("ncclInProgress = %d, expected 7", want)
	}
	if want, ok := results["ncclSuccess"]; !ok || want != 0 {
		t.Errorf("ncclSuccess = %d (%v), shim.c takes 0 for success", want, ok)
	}
	// godist's own codes in gn_status.nccl must not be NCCL's.
	for _, name := range []string{"GN_TIMEOUT", "GN_NOT_LOADED"} {
		m := regexp.MustCompile(name + `\s*=\s*(\d+)`).FindStringSubmatch(string(shimH))
		if m == nil {
			t.Fatalf("shim.h: no %s", name)
		}
		v, _ := strconv.Atoi(m[1])
		for rn, rv := range results {
			if rv == v {
				t.Errorf("shim.h: %s = %d is nccl.h's %s", name, v, rn)
			}
		}
	}

	code := defineValue(t, h, "NCCL_VERSION_CODE")
	if code < MinVersion {
		t.Errorf("nccl.h's NCCL_VERSION_CODE %d is older than MinVersion %d", code, MinVersion)
	}
	if got := defineValue(t, shim, "GN_CONFIG_VERSION"); got != MinVersion {
		t.Errorf("shim.c: GN_CONFIG_VERSION = %d, MinVersion = %d (the ncclConfig_t it declares)", got, MinVersion)
	}
	if got, want := defineValue(t, shim, "GN_MAGIC"), defineValue(t, h, "NCCL_API_MAGIC"); got != want {
		t.Errorf("shim.c: GN_MAGIC = %#x, nccl.h's NCCL_API_MAGIC = %#x", got, want)
	}

	m := regexp.MustCompile(`(?s)typedef\s+struct\s*\{([^}]*)\}\s*gn_config\s*;`).FindStringSubmatch(shim)
	if m == nil {
		t.Fatal("shim.c: no gn_config")
	}
	ours := structFields(m[1])
	wantNames := []string{"size", "magic", "version", "blocking", "cgaClusterSize", "minCTAs", "maxCTAs", "netName",
		"splitShare"}
	if len(ours) != len(wantNames) {
		t.Fatalf("shim.c: gn_config has fields %q, expected %d (2.18's ncclConfig_t)", ours, len(wantNames))
	}
	for i, f := range ours {
		if !strings.HasSuffix(f, " "+wantNames[i]) && !strings.HasSuffix(f, "*"+wantNames[i]) {
			t.Errorf("shim.c: gn_config field %d is %q, expected %s", i, f, wantNames[i])
		}
	}
	m = regexp.MustCompile(`(?s)typedef\s+struct\s+\w*\s*\{([^}]*)\}\s*ncclConfig_t\s*;`).FindStringSubmatch(h)
	if m == nil {
		t.Fatal("nccl.h: no ncclConfig_t")
	}
	theirs := structFields(m[1])
	if len(theirs) < len(ours) {
		t.Fatalf("nccl.h's ncclConfig_t has %d fields, gn_config %d", len(theirs), len(ours))
	}
	for i := range ours {
		if ours[i] != theirs[i] {
			t.Errorf("ncclConfig_t field %d: shim.c declares %q, nccl.h %q", i, ours[i], theirs[i])
		}
	}
}
