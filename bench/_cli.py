"""The command line every benchmark module shares: `--help` prints the module's docstring as written (what
it measures, its commands), then the options."""

from __future__ import annotations

import argparse


def parser(doc: str | None) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
