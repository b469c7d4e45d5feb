"""`pip install ./python` into a fresh virtual environment, offline: the
venv sees the system's numpy (--system-site-packages) and builds with the
system's setuptools (--no-build-isolation --no-index: no network). The
install writes nothing into the sources (python/setup.py keeps setuptools'
scratch folders out of them). Then the installed package finds the library
through PATINA_LIB, and, when a copy of libpatina.so is put in the package
before installing, in its own directory. After `cmake --install` the
package finds the installed library with no PATINA_LIB (pkg-config's libdir
of patina)."""

import ctypes
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.dirname(HERE)

PROBE = r"""
import os, sys, patina
lib = patina.load()
print(os.path.realpath(patina.__file__))
print(os.path.realpath(lib.path))
print(patina.version())
d = patina.extract(sys.argv[1], "lbp:P=8,R=1")
print(d.dtype, d.shape, float(d.sum()) > 0.99)
"""


def _venv_ok():
    try:
        import ensurepip  # noqa: F401
        import venv  # noqa: F401
        import setuptools  # noqa: F401
    except ImportError:
        return False
    return True


def _tree(root):
    """Every path under root, relative to it."""
    return {os.path.relpath(os.path.join(d, n), root) for d, dirs, files in os.walk(root) for n in dirs + files}


def _run(args, env=None, cwd=None):
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd, timeout=300)
    assert p.returncode == 0, f"{args} exited {p.returncode}:\n{p.stdout.decode(errors='replace')}"
    return p.stdout.decode()


def test_pip_install_into_venv(tmp_path, synthetic):
    if not _venv_ok():
        pytest.skip("python3-venv (ensurepip) or setuptools missing: cannot make a venv offline")
    src = tmp_path / "src"
    # a copy of the sources, to see what the install writes there
    shutil.copytree(PYDIR, src, ignore=shutil.ignore_patterns("__pycache__", "tests", "build", "*.egg-info",
                                                              "libpatina.so*"))
    before = _tree(src)
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)])
    py = str(venv / "bin" / "python")
    pip = [py, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-index", "--disable-pip-version-check"]
    _run(pip + [str(src)], cwd=str(tmp_path))
    assert _tree(src) == before, f"pip install wrote into the sources: {sorted(_tree(src) - before)}"

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    lib = os.path.realpath(os.environ["PATINA_LIB"])
    env["PATINA_LIB"] = lib
    out = _run([py, "-c", PROBE, synthetic["rgb_path"]], env=env, cwd=str(tmp_path)).splitlines()
    assert out[0].startswith(str(venv)), f"imported {out[0]}, not the installed package"
    assert out[1] == lib
    assert out[3] == "float32 (256,) True"

    # the library shipped inside the package: found there without PATINA_LIB
    shutil.copy(lib, src / "patina" / "libpatina.so")
    _run(pip + ["--force-reinstall", "--no-deps", str(src)], cwd=str(tmp_path))
    del env["PATINA_LIB"]
    out = _run([py, "-c", PROBE, synthetic["rgb_path"]], env=env, cwd=str(tmp_path)).splitlines()
    assert out[0].startswith(str(venv))
    assert out[1].startswith(str(venv)) and os.path.basename(out[1]) == "libpatina.so", out[1]
    assert out[3] == "float32 (256,) True"


def test_found_after_cmake_install(tmp_path, synthetic):
    """`cmake --install` of this build into a prefix (as `make install` does
    into /usr/local); with that prefix's pkgconfig folder known to
    pkg-config (/usr/local's is by default), `patina.load()` finds the
    installed library without PATINA_LIB."""
    cmake, pkg_config = shutil.which("cmake"), shutil.which("pkg-config")
    if not cmake or not pkg_config:
        pytest.skip("cmake or pkg-config missing")
    build = os.path.dirname(os.path.realpath(os.environ["PATINA_LIB"]))
    if not os.path.isfile(os.path.join(build, "cmake_install.cmake")):
        pytest.skip(f"PATINA_LIB is not in a CMake build folder ({build})")
    try:
        ctypes.CDLL("libpatina.so.0")
        pytest.skip("the system loader already finds a libpatina.so.0 (installed system-wide)")
    except OSError:
        pass
    prefix = tmp_path / "prefix"
    _run([cmake, "--install", build, "--prefix", str(prefix)])
    pcdirs = sorted(str(p.parent) for p in prefix.rglob("patina.pc"))
    assert len(pcdirs) == 1, pcdirs
    env = {k: v for k, v in os.environ.items() if k not in ("PATINA_LIB", "LD_LIBRARY_PATH")}
    env["PKG_CONFIG_PATH"] = pcdirs[0]
    env["PYTHONPATH"] = PYDIR
    out = _run([sys.executable, "-c", PROBE, synthetic["rgb_path"]], env=env, cwd=str(tmp_path)).splitlines()
    assert out[1].startswith(str(prefix)) and os.path.basename(out[1]).startswith("libpatina.so"), out[1]
    assert out[3] == "float32 (256,) True"
