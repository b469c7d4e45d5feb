"""Fixtures of the binding's tests: the library and the CLI of one build,
the sample photographs, and small images written here.

CTest (tests/CMakeLists.txt, test_python) sets PATINA_LIB, PATINA_CLI,
PATINA_VARIANT and PATINA_SAMPLES_DIR to the build's files. Run by hand
from the repository, they default to build/ and samples/:

    PATINA_LIB=build/libpatina.so PYTHONPATH=python python3 -m pytest python/tests
"""

import os
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))
os.environ.setdefault("PATINA_LIB", os.path.join(REPO, "build", "libpatina.so"))

import patina  # noqa: E402

CLI = os.environ.get("PATINA_CLI", os.path.join(REPO, "build", "patina"))
VARIANT = os.environ.get("PATINA_VARIANT", os.path.join(REPO, "build", "patina-variant"))
SAMPLES = os.environ.get("PATINA_SAMPLES_DIR", os.path.join(REPO, "samples"))

# Real photographs of scripts/fetch-samples.sh, small ones (the suite stays
# quick): JPEG and PNG, colour, grey (box.png) and RGBA (opencv-logo-white.png).
SAMPLE_NAMES = [
    "opencv/baboon.jpg", "opencv/fruits.jpg", "opencv/box.png", "opencv/HappyFish.jpg", "opencv/pic1.png",
    "opencv/notes.png", "opencv/left01.jpg", "opencv/blox.jpg", "opencv/opencv-logo-white.png",
    "opencv/LinuxLogo.jpg", "opencv/Blender_Suzanne1.jpg", "opencv/pic3.png", "kphotoalbum/bar55.jpg",
    "kphotoalbum/donna.jpg",
]


def pytest_report_header(config):
    return [f"patina library: {os.environ.get('PATINA_LIB')}", f"patina CLI: {CLI}", f"samples: {SAMPLES}"]


@pytest.fixture(scope="session")
def cli():
    if not os.access(CLI, os.X_OK):
        pytest.skip(f"no patina CLI at {CLI} (set PATINA_CLI)")
    return CLI


@pytest.fixture(scope="session")
def samples():
    """Paths of the sample photographs (skips without scripts/fetch-samples.sh's files)."""
    paths = [os.path.join(SAMPLES, n) for n in SAMPLE_NAMES]
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        pytest.skip(f"sample photographs missing ({len(missing)} of {len(paths)}, e.g. {missing[0]}): "
                    "run scripts/fetch-samples.sh")
    return paths


def run(*args, check=True, cwd=None):
    """Runs a program; returns its stdout as bytes (stderr shown on failure)."""
    p = subprocess.run([str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd,
                       timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"{args} exited {p.returncode}:\n{p.stderr.decode(errors='replace')}")
    return p.stdout


def run_full(*args, cwd=None):
    p = subprocess.run([str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd,
                       timeout=300)
    return p.returncode, p.stdout, p.stderr


def read_bin(data):
    """The records of `patina extract --format bin`: (spec, [(path, record bytes)])."""
    assert data[:8] == b"PATINADS"
    ver, slen = struct.unpack_from("<II", data, 8)
    assert ver == 1
    pos = 16
    spec = data[pos:pos + slen].decode()
    pos += slen
    (size,) = struct.unpack_from("<I", data, pos)
    pos += 4
    out = []
    while pos < len(data):
        (plen,) = struct.unpack_from("<I", data, pos)
        pos += 4
        path = data[pos:pos + plen].decode()
        pos += plen
        out.append((path, data[pos:pos + size]))
        pos += size
    return spec, out


def write_png(path, a):
    """Writes a uint8 (H, W) grey or (H, W, 3) RGB array as an 8-bit PNG."""
    a = np.ascontiguousarray(a, dtype=np.uint8)
    h, w = a.shape[:2]
    ctype = 0 if a.ndim == 2 else 2
    raw = b"".join(b"\0" + a[y].tobytes() for y in range(h))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, ctype, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def smooth_noise(h, w, channels=3, seed=0):
    """A deterministic test image with texture at several scales."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, size=(h // 4 + 2, w // 4 + 2, channels)).astype(np.float64)
    img = np.kron(base, np.ones((4, 4, 1)))[:h, :w]
    img += rng.normal(0, 20, size=img.shape)
    img = np.clip(img, 0, 255).astype(np.uint8)
    return img[:, :, 0] if channels == 1 else img


@pytest.fixture
def synthetic(tmp_path):
    """A small RGB PNG, a grey PNG, and their pixel arrays."""
    rgb = smooth_noise(48, 64, 3, seed=1)
    grey = smooth_noise(40, 56, 1, seed=2)
    prgb, pgrey = tmp_path / "rgb.png", tmp_path / "grey.png"
    write_png(prgb, rgb)
    write_png(pgrey, grey)
    return {"rgb": rgb, "grey": grey, "rgb_path": str(prgb), "grey_path": str(pgrey)}
