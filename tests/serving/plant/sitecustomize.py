"""Run by every interpreter started with this folder on PYTHONPATH (tests.serving.planted.in_servers): in a
server process, plants the decoding fault EYAS_TEST_DECODING_PLANT names ("flip" or "lossy"); "lossy@3"
plants it only in a server started with `--depth 3` (one config of a sweep)."""

import itertools
import os
import sys
from pathlib import Path

_kind, _, _depth = os.environ.get("EYAS_TEST_DECODING_PLANT", "").partition("@")
_argv = sys.argv
_here = not _depth or any(a == "--depth" and b == _depth for a, b in itertools.pairwise(_argv))
if _kind and _here:
    sys.path.append(str(Path(__file__).resolve().parents[3]))  # the repository root: `tests` importable
    from tests.serving.planted import plant

    plant(_kind)
