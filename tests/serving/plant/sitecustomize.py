"""Run by every interpreter started with this folder on PYTHONPATH (tests.serving.planted.in_servers): in a
server process, plants the decoding fault EYAS_TEST_DECODING_PLANT names ("flip" or "lossy")."""

import os
import sys
from pathlib import Path

if os.environ.get("EYAS_TEST_DECODING_PLANT"):
    sys.path.append(str(Path(__file__).resolve().parents[3]))  # the repository root: `tests` importable
    from tests.serving.planted import plant

    plant(os.environ["EYAS_TEST_DECODING_PLANT"])
