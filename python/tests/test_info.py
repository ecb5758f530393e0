"""``godist info`` (and the ``godist`` command) against what is true on the
machine running the tests: each report runs as ``python -m godist info`` in
a subprocess and is checked against what this process finds itself."""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import json
import os
import platform
import re
import shutil
import subprocess
import sys

import pytest
import torch

import godist
from godist import __main__ as cli
from godist import _lib, info

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NO_DRIVER = "no NVIDIA driver (libnvidia-ml.so.1 not found)"


def _env(**extra) -> dict:
    """This environment without any GODIST_* or GOMAXPROCS setting, plus extra."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GODIST_") and k != "GOMAXPROCS"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env.update(extra)
    return env


def _run(*args, **extra) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "godist", *args], env=_env(**extra), capture_output=True, text=True,
                          timeout=120)


def _report(**extra) -> dict:
    r = _run("info", "--json", **extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _setting(report, name) -> dict:
    (s,) = [s for s in report["env"]["settings"] if s["name"] == name]
    return s


def _has_nvidia_driver() -> bool:
    return os.path.exists("/proc/driver/nvidia") or ctypes.util.find_library("nvidia-ml") is not None


@pytest.fixture(scope="module")
def report():
    return _report()


@pytest.mark.timeout(180)
def test_json_matches_this_machine(report):
    assert report["schema"] == info.SCHEMA
    assert report["python"]["version"] == platform.python_version()
    assert report["python"]["executable"] == sys.executable
    assert report["torch"]["version"] == torch.__version__
    assert report["torch"]["cuda"] == torch.version.cuda
    g = report["godist"]
    assert g["version"] == godist.__version__
    assert g["package"] == os.path.dirname(os.path.abspath(godist.__file__))
    lib = g["library"]
    assert lib["loaded"] and lib["error"] is None and lib["path"] == _lib.library_path()
    assert lib["abi_version"] == lib["abi_expected"] == _lib.ABI_VERSION
    b = lib["build"]
    go = subprocess.run(["go", "version"], capture_output=True, text=True, timeout=30).stdout if shutil.which("go") \
        else ""
    assert re.fullmatch(r"go\d+\.\d+(\.\d+)?\S*", b["go_version"]), b
    if go:  # the library was built by the toolchain on PATH (make lib, pip install -e .)
        assert b["go_version"] in go.split(), go
    affinity = len(os.sched_getaffinity(0))
    assert b["num_cpu"] == affinity and b["gomaxprocs"] == affinity + b["spare_procs"] and b["gomaxprocs_env"] is None
    assert (b["goos"], b["goarch"]) == ("linux", {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine()))

    c = report["cpus"]
    assert c["count"] == os.cpu_count() and c["affinity"] == affinity and c["go_num_cpu"] == affinity
    assert c["usable"] <= affinity

    t = report["transports"]
    assert t["selected"] == "auto"
    shm = t["shm"]
    assert shm["usable"] and shm["enabled"] and shm["reason"] is None and shm["dir"] == "/dev/shm"
    st = os.statvfs("/dev/shm")
    assert shm["total_bytes"] == st.f_blocks * st.f_frsize and 0 < shm["free_bytes"] <= shm["total_bytes"]
    assert shm["boot_id"] == open("/proc/sys/kernel/random/boot_id").read().strip()
    tcp = t["tcp"]
    assert tcp["usable"] and tcp["fabric"] == "tcp" and tcp["bind"] is None and tcp["addresses"][0] == "127.0.0.1"

    for key in ("nccl", "cuda_runtime"):
        assert report[key]["used_by_godist"] is True and "NCCL path" in report[key]["note"]
    assert report["mpi"]["used_by_godist"] is True and "mpirun" in report["mpi"]["note"]
    assert isinstance(report["mpi"]["shims"], list)
    n = report["gpus"]["nccl_path"]
    assert n["available"] and n["version"] == ".".join(map(str, torch.cuda.nccl.version()))
    if not torch.cuda.is_available():
        assert n["devices"] == 0 and n["cuda_tensors"] == "staged" and "cudaGetDeviceCount" in n["devices_error"]


def test_json_keys_are_documented(report):
    """Every key of the report, and of its sections, is in docs/info.md."""
    doc = open(os.path.join(ROOT, "docs", "info.md")).read()
    table = doc[doc.index("## JSON"):]
    keys = set(report)
    for section in ("godist", "python", "torch", "platform", "cpus", "transports", "nccl", "cuda_runtime", "mpi",
                    "gpus", "env"):
        keys |= set(report[section])
    keys |= set(report["godist"]["library"]) | set(report["godist"]["library"]["build"])
    keys |= set(report["transports"]["shm"]) | set(report["transports"]["tcp"])
    keys |= set(report["nccl"]["tried"][0]) | set(report["gpus"]["devices"][0] if report["gpus"]["devices"] else {})
    keys |= set(report["env"]["settings"][0])
    gi = report["gpus"]["gpuinfo"]
    keys |= set(gi)
    for d in gi["devices"]:
        keys |= set(d) | set(d["nvlink"]) | {k for x in d["nvlink"]["links"] for k in x}
    for p in gi["topology"]:
        keys |= set(p) | set(p["p2p"])
    undocumented = sorted(k for k in keys if not re.search(rf"[`.{{ ]{k}[`.,}}]", table))
    assert not undocumented, f"document these keys in docs/info.md: {undocumented}"


@pytest.mark.timeout(180)
def test_nccl_and_cuda_runtime_found_in_torchs_environment(report):
    try:
        want = ".".join(map(str, torch.cuda.nccl.version()))
    except (AttributeError, RuntimeError):
        pytest.skip("this torch was built without NCCL")
    nccl = report["nccl"]
    site = os.path.dirname(os.path.dirname(os.path.abspath(torch.__file__)))
    pip = glob.glob(os.path.join(site, "nvidia", "nccl", "lib", "libnccl.so.2"))
    if not pip:
        pytest.skip("torch's environment has no nvidia-nccl package")
    assert nccl["found"] and nccl["version"] == want and nccl["reason"] is None, nccl
    assert os.path.realpath(nccl["path"]) == os.path.realpath(pip[0])
    assert nccl["where"] == "torch's environment (nvidia-nccl package)"
    assert nccl["tried"][-1]["found"] and nccl["tried"][-1]["path"] == nccl["path"]
    cudart = report["cuda_runtime"]
    if torch.version.cuda and cudart["where"] and cudart["where"].startswith("torch's environment"):
        assert cudart["version"].split(".")[0] == torch.version.cuda.split(".")[0], cudart


@pytest.mark.timeout(180)
def test_gpus_and_mpi_as_this_machine_has_them(report):
    gpus = report["gpus"]
    if _has_nvidia_driver():
        assert gpus["driver"] and gpus["nvml_path"], gpus
        assert len(gpus["devices"]) == torch.cuda.device_count()
        for d in gpus["devices"]:
            assert d["error"] is None and d["name"] and d["memory_total"] > 0
    else:
        assert not gpus["driver"] and gpus["reason"] == NO_DRIVER and gpus["devices"] == []
    mpi = report["mpi"]
    if ctypes.util.find_library("mpi") is None and not shutil.which("mpirun"):
        assert not mpi["found"] and mpi["reason"].startswith("not found") and mpi["mpirun"] is None, mpi
        assert [t["path"] for t in mpi["tried"] if t["where"] == "system loader"] == \
            ["libmpi.so.40", "libmpich.so.12", "libmpi.so.12"]  # backends/mpi's MPILibraries


@pytest.mark.timeout(180)
def test_text_report():
    r = _run("info")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert f"godist {godist.__version__} " in out
    assert f"library      {_lib.library_path()} (ABI {_lib.ABI_VERSION})" in out
    assert f"\nPython {platform.python_version()} (" in out and f"\ntorch {torch.__version__} " in out
    assert "shared mem   usable: /dev/shm, " in out and "TCP          usable: listens on all interfaces" in out
    assert re.search(r"NCCL +found: \S+libnccl\.so\.2, version \d+\.\d+\.\d+", out) or "NCCL         not found" in out
    assert "NCCL and the CUDA runtime: used for CUDA tensors" in out and "godist's MPI shims: " in out
    assert "NCCL path: " in out and "CUDA tensors go through" in out
    if not _has_nvidia_driver():
        assert f"GPUs\n  {NO_DRIVER}\n" in out
    for name, (default, _) in info.SETTINGS.items():
        assert f"  {name} (not set" in out
    assert "GODIST_TRANSPORT (not set, default auto): shared memory" in out
    assert "warning:" not in out


@pytest.mark.timeout(180)
def test_settings_in_force_and_unknown_ones():
    env = dict(GODIST_TRANSPORT="tcp", GODIST_FOO="1", GODIST_TRANSPRT="tcp", GODIST_DUMP_ON_SIGNAL="usr2",
               GODIST_SHM_BENCH="1", GOMAXPROCS="3")
    rep = _report(**env)
    s = _setting(rep, "GODIST_TRANSPORT")
    assert s["set"] and s["value"] == "tcp" and s["effect"] == "TCP only, also between ranks on this host"
    assert s["problem"] is None
    assert rep["transports"]["selected"] == "tcp" and rep["transports"]["shm"]["enabled"] is False
    assert "GODIST_TRANSPORT=tcp" in rep["transports"]["shm"]["note"]
    assert "SIGUSR2" in _setting(rep, "GODIST_DUMP_ON_SIGNAL")["effect"]
    assert _setting(rep, "GODIST_SHM_BENCH")["effect"] == "read only by godist's tests and benchmarks"
    assert not _setting(rep, "GODIST_BIND_ADDR")["set"]
    unknown = {u["name"]: u for u in rep["env"]["unknown"]}
    assert set(unknown) == {"GODIST_FOO", "GODIST_TRANSPRT"}
    assert unknown["GODIST_TRANSPRT"]["did_you_mean"] == "GODIST_TRANSPORT"
    assert unknown["GODIST_FOO"]["did_you_mean"] is None
    assert rep["warnings"] == ["GODIST_FOO='1': unknown setting, ignored",
                               "GODIST_TRANSPRT='tcp': unknown setting, ignored (did you mean GODIST_TRANSPORT?)"]
    b = rep["godist"]["library"]["build"]
    assert b["gomaxprocs"] == 3 and b["gomaxprocs_env"] == "3" and rep["env"]["gomaxprocs"] == "3"

    out = _run("info", **env).stdout
    assert "  GODIST_TRANSPORT=tcp: TCP only, also between ranks on this host\n" in out
    assert "Transports (GODIST_TRANSPORT=tcp)" in out
    assert "warning: GODIST_FOO='1': unknown setting, ignored\n" in out
    assert "GOMAXPROCS   3 (GOMAXPROCS=3)" in out


@pytest.mark.timeout(180)
def test_invalid_settings_are_reported():
    rep = _report(GODIST_TRANSPORT="ib", GODIST_LOG_LEVEL="loud", GODIST_DUMP_ON_SIGNAL="SIGNOPE")
    assert rep["godist"]["library"]["loaded"]  # a bad log level does not hide the library
    assert _setting(rep, "GODIST_TRANSPORT")["effect"] == "invalid: creating a group raises ValueError"
    assert rep["warnings"] == ["GODIST_TRANSPORT='ib': use auto, tcp or mpi",
                               "GODIST_LOG_LEVEL='loud': use DEBUG, INFO, WARNING, ERROR or OFF",
                               "GODIST_DUMP_ON_SIGNAL='SIGNOPE': use 1 (SIGUSR1) or a signal's name or number"]


@pytest.mark.timeout(180)
def test_bind_address_not_on_this_host(report):
    addr = "203.0.113.7"  # TEST-NET-3
    if addr in report["transports"]["tcp"]["addresses"]:
        pytest.skip(f"{addr} is an address of this host")
    rep = _report(GODIST_BIND_ADDR=addr)
    tcp = rep["transports"]["tcp"]
    assert not tcp["usable"] and tcp["bind"] == addr and tcp["addresses"] == []
    assert f'GODIST_BIND_ADDR="{addr}": no interface of this host has this address; this host has lo (' \
        in tcp["reason"]
    assert _setting(rep, "GODIST_BIND_ADDR")["effect"] == f"TCP listens on {addr}"
    assert rep["warnings"] == [f"TCP cannot listen, no group can be created: {tcp['reason']}"]
    ok = _report(GODIST_BIND_ADDR="127.0.0.1")["transports"]["tcp"]
    assert ok["usable"] and ok["addresses"] == ["127.0.0.1"] and ok["choice"] == "bind"
    assert ok["listen"] == ["127.0.0.1"] and ok["interfaces"] == ["lo"]


@pytest.mark.timeout(180)
def test_socket_ifname():
    rep = _report(GODIST_SOCKET_IFNAME="=lo")
    tcp = rep["transports"]["tcp"]
    assert tcp["usable"] and tcp["choice"] == "ifname" and tcp["ifname"] == "=lo"
    assert tcp["addresses"][0] == "127.0.0.1" and set(tcp["interfaces"]) == {"lo"}
    assert tcp["listen"] == tcp["addresses"] and tcp["why"] == "GODIST_SOCKET_IFNAME==lo selects lo"
    assert _setting(rep, "GODIST_SOCKET_IFNAME")["effect"] == \
        "TCP listens on and publishes the addresses of the interfaces named lo"
    assert rep["warnings"] == []

    bad = _report(GODIST_SOCKET_IFNAME="gdnosuch0,lo")
    tcp = bad["transports"]["tcp"]
    assert not tcp["usable"] and tcp["choice"] is None and tcp["addresses"] == []
    assert tcp["reason"].startswith('godist: GODIST_SOCKET_IFNAME="gdnosuch0,lo": no interface name starts with '
                                    '"gdnosuch0"; this host has lo (127.0.0.1')
    assert bad["warnings"] == [f"TCP cannot listen, no group can be created: {tcp['reason']}"]

    both = _report(GODIST_SOCKET_IFNAME="gdnosuch0", GODIST_BIND_ADDR="127.0.0.1")
    assert both["transports"]["tcp"]["usable"] and both["transports"]["tcp"]["addresses"] == ["127.0.0.1"]
    assert _setting(both, "GODIST_SOCKET_IFNAME")["effect"] == "overridden by GODIST_BIND_ADDR"

    # A store on loopback: every rank is on this host, which listens there only.
    local = _report(MASTER_ADDR="127.0.0.1")["transports"]["tcp"]
    assert local["choice"] == "loopback" and local["listen"] == local["addresses"] == ["127.0.0.1"]
    assert local["why"] == ("the store's host 127.0.0.1 is this host's loopback (127.0.0.1), so every rank of the "
                            "group runs here")
    assert "no other host can reach these ports" in local["note"]


@pytest.mark.timeout(60)
def test_shm_probe_failures(tmp_path):
    lib = _lib.load()
    ok = info.shm_report(lib, str(tmp_path))
    assert ok["usable"] and ok["reason"] is None and ok["dir"] == str(tmp_path) and os.listdir(tmp_path) == []
    missing = info.shm_report(lib, str(tmp_path / "missing"))
    assert not missing["usable"] and missing["free_bytes"] is None
    assert missing["reason"].startswith(f"shm: probe: open {tmp_path / 'missing'}/godist-probe-")
    assert missing["reason"].endswith("no such file or directory")
    (tmp_path / "file").write_text("")
    assert info.shm_report(lib, str(tmp_path / "file"))["reason"].endswith("not a directory")
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        assert info.shm_report(lib, str(ro))["reason"].endswith("permission denied")


@pytest.mark.timeout(180)
def test_shm_failure_in_the_text_report(report, tmp_path):
    rep = json.loads(json.dumps(report))
    rep["transports"]["shm"] = info.shm_report(_lib.load(), str(tmp_path / "missing"))
    out = info.render(rep)
    line = [ln for ln in out.splitlines() if ln.startswith("  shared mem")][0]
    assert line.startswith(f"  shared mem   unusable: {tmp_path / 'missing'}, unknown free of unknown: shm: probe: ")
    assert line.endswith("no such file or directory")


def test_cgroup_cpu_limit(tmp_path):
    """The tightest quota along the process's cgroup path, v2 and v1."""
    def write(path, text):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    fs = tmp_path / "cgroup"
    write(fs / "cpu.max", "max 100000\n")
    write(fs / "kubepods" / "cpu.max", "400000 100000\n")
    write(fs / "kubepods" / "pod1" / "cpu.max", "150000 100000\n")
    write(fs / "kubepods" / "pod1" / "c1" / "cpu.max", "max 100000\n")
    write(tmp_path / "v2", "0::/kubepods/pod1/c1\n")
    assert info._cgroup_cpus(str(tmp_path / "v2"), str(fs)) == (1.5, str(fs / "kubepods" / "pod1" / "cpu.max"))
    write(fs / "cpu,cpuacct" / "job" / "cpu.cfs_quota_us", "200000\n")
    write(fs / "cpu,cpuacct" / "job" / "cpu.cfs_period_us", "100000\n")
    write(fs / "cpu,cpuacct" / "cpu.cfs_quota_us", "-1\n")
    write(fs / "cpu,cpuacct" / "cpu.cfs_period_us", "100000\n")
    write(tmp_path / "v1", "4:memory:/job\n3:cpu,cpuacct:/job\n")
    v1 = fs / "cpu,cpuacct" / "job" / "cpu.cfs_quota_us"
    assert info._cgroup_cpus(str(tmp_path / "v1"), str(fs)) == (2.0, str(v1))
    write(tmp_path / "none", "3:cpu,cpuacct:/\n")
    assert info._cgroup_cpus(str(tmp_path / "none"), str(fs)) == (None, None)


def _compile(tmp_path, name: str, source: str) -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    d = tmp_path / "lib"
    d.mkdir(exist_ok=True)
    src = tmp_path / (name + ".c")
    src.write_text(source)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(d / name), str(src)], check=True, timeout=60)
    return str(d)


FAKE_NVML = r"""
#include <stdlib.h>
#include <string.h>
static int env(const char *k) { const char *v = getenv(k); return v ? atoi(v) : 0; }
int nvmlInit_v2(void) { return env("FAKE_NVML_INIT"); }
int nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(int rc) { return rc == 9 ? "Driver Not Loaded" : "Unknown Error"; }
int nvmlSystemGetDriverVersion(char *b, unsigned n) { strncpy(b, "999.12", n); return 0; }
int nvmlSystemGetCudaDriverVersion(int *v) { *v = 13020; return 0; }
int nvmlDeviceGetCount_v2(unsigned *n) { *n = 2; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h) { *h = (void *)(long)(i + 1); return 0; }
int nvmlDeviceGetName(void *h, char *b, unsigned n) {
    strncpy(b, h == (void *)1 ? "Fake H100" : "Fake B200", n); return 0;
}
typedef struct { unsigned long long total, free, used; } mem;
int nvmlDeviceGetMemoryInfo(void *h, mem *m) {
    if (h == (void *)2) return 999;
    m->total = 80ULL << 30; m->free = 79ULL << 30; m->used = 1ULL << 30; return 0;
}
"""

FAKE_MPI = r"""
#include <stdlib.h>
#include <string.h>
__attribute__((constructor)) static void crash(void) { if (getenv("FAKE_MPI_CRASH")) abort(); }
int MPI_Get_library_version(char *v, int *n) { strcpy(v, "Fake MPI 4.1.0\nsecond line"); *n = strlen(v); return 0; }
"""


@pytest.mark.timeout(180)
def test_nvml_driver_path(tmp_path):
    """A stand-in libnvidia-ml.so.1 with two GPUs, the second failing its
    memory query: the report lists both and the failing call by name."""
    d = _compile(tmp_path, "libnvidia-ml.so.1", FAKE_NVML)
    rep = _report(LD_LIBRARY_PATH=d)
    g = rep["gpus"]
    assert g["driver"] and g["nvml_path"] == os.path.join(d, "libnvidia-ml.so.1") and g["reason"] is None, g
    assert (g["driver_version"], g["cuda_driver_version"]) == ("999.12", "13.2")
    assert g["devices"] == [
        {"index": 0, "name": "Fake H100", "memory_total": 80 << 30, "memory_free": 79 << 30, "error": None},
        {"index": 1, "name": "Fake B200", "memory_total": None, "memory_free": None,
         "error": "nvmlDeviceGetMemoryInfo(1) failed: Unknown Error (999)"}]
    out = _run("info", LD_LIBRARY_PATH=d).stdout
    assert "  NVIDIA driver 999.12 (CUDA 13.2), " in out
    assert "  GPU 0: Fake H100, 80.0 GiB (79.0 GiB free)\n" in out
    assert "  GPU 1: error: nvmlDeviceGetMemoryInfo(1) failed: Unknown Error (999)\n" in out

    g = _report(LD_LIBRARY_PATH=d, FAKE_NVML_INIT="9")["gpus"]
    assert not g["driver"] and g["devices"] == []
    assert g["reason"] == (f"the NVIDIA driver's {os.path.join(d, 'libnvidia-ml.so.1')} is unusable: "
                           "nvmlInit_v2 failed: Driver Not Loaded (9)")


@pytest.mark.timeout(180)
def test_mpi_from_ld_library_path_and_a_crashing_library(report, tmp_path):
    d = _compile(tmp_path, "libmpi.so.40", FAKE_MPI)
    mpi = _report(LD_LIBRARY_PATH=d)["mpi"]
    assert mpi["found"] and mpi["where"] == "LD_LIBRARY_PATH" and mpi["path"] == os.path.join(d, "libmpi.so.40")
    assert mpi["version"] == "Fake MPI 4.1.0" and mpi["used_by_godist"] is True
    rep = _report(LD_LIBRARY_PATH=d, FAKE_MPI_CRASH="1")
    mpi = rep["mpi"]
    assert not mpi["found"] and mpi["reason"].startswith("the probe was killed by signal 6"), mpi
    assert rep["nccl"] == report["nccl"]  # the other probes ran apart from it


@pytest.mark.timeout(180)
def test_unloadable_library(tmp_path):
    missing = str(tmp_path / "libgodist.so")
    r = _run("info", "--json", GODIST_LIBRARY=missing)
    assert r.returncode == 1, r.stderr
    rep = json.loads(r.stdout)
    lib = rep["godist"]["library"]
    assert not lib["loaded"] and lib["path"] == missing and missing in lib["error"] and lib["build"] is None
    assert rep["python"]["version"] == platform.python_version() and rep["transports"]["shm"] is None
    assert rep["warnings"][0] == f"the godist library cannot be loaded: {lib['error']}"
    assert _setting(rep, "GODIST_LIBRARY")["problem"] == f"{missing} does not exist"
    r = _run("info", GODIST_LIBRARY=missing)
    assert r.returncode == 1 and f"cannot load: {lib['error']}" in r.stdout


@pytest.mark.timeout(180)
def test_godist_command(capsys):
    assert cli.main([]) == 2
    assert "usage: godist" in capsys.readouterr().err
    r = _run()
    assert r.returncode == 2 and "info" in r.stderr and "python -m godist.bench" in r.stderr
    r = _run("nonsense")
    assert r.returncode == 2 and "invalid choice" in r.stderr
    r = _run("info", "--bogus")
    assert r.returncode == 2 and "unrecognized arguments: --bogus" in r.stderr
    r = subprocess.run([sys.executable, "-m", "godist.bench", "--help"], env=_env(), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "usage:" in r.stdout, r.stderr


def test_every_godist_setting_in_the_source_is_known():
    """A GODIST_* variable read anywhere in godist is described by info (or
    info would call it unknown); the C macros of godist.h are not settings."""
    macros = set(re.findall(r"\bGODIST_[A-Z0-9_]+", open(os.path.join(ROOT, "capi", "godist.h")).read()))
    table = os.path.join(ROOT, "python", "godist", "info", "settings.py")
    found = {}
    for sub in ("python", "capi", "libgodist", "backends", "store", "assemble"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, sub)):
            for f in files:
                path = os.path.join(dirpath, f)
                if f.endswith((".py", ".go")) and path != table and f != "test_info.py":
                    for name in re.findall(r"\bGODIST_[A-Z0-9_]+", open(path).read()):
                        found.setdefault(name, path)
    names = set(found) - macros
    assert "GODIST_TRANSPORT" in names and "GODIST_DUMP_ON_SIGNAL" in names
    missing = {n: found[n] for n in names
               if n not in info.SETTINGS and n not in info.TEST_SETTINGS and n not in info.BUILD_SETTINGS}
    assert not missing, f"add these to godist.info.SETTINGS, TEST_SETTINGS or BUILD_SETTINGS: {missing}"
