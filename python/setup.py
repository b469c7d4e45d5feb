"""Builds the package without writing into the source tree.

The metadata is in pyproject.toml. setuptools would put its scratch
folders (build/ and patina.egg-info) beside these sources; here they go to
a temporary folder, removed when the build step ends, so `pip install
./python` leaves the checkout as it was."""

import atexit
import shutil
import tempfile

from setuptools import setup

_scratch = tempfile.mkdtemp(prefix="patina-python-build-")
atexit.register(shutil.rmtree, _scratch, True)
setup(options={"build": {"build_base": _scratch}, "egg_info": {"egg_base": _scratch}})
