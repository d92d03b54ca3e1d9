"""Shared helpers: the crate's public vectors live in the repository's tests/data/."""

import json
import pathlib
import threading

import pytest

DATA = pathlib.Path(__file__).resolve().parents[2] / "tests" / "data"


def load(name: str) -> dict:
    """One of the crate's public vector files."""
    return json.loads((DATA / name).read_text())


def in_fresh_thread(fn):
    """fn() on a new thread: a fresh kept state (nothing reused from earlier calls)."""
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("v", fn()))
    t.start()
    t.join()
    return box["v"]


@pytest.fixture(scope="session")
def verl_public() -> dict:
    return load("verl_public.json")


@pytest.fixture(scope="session")
def official_migpo() -> dict:
    return load("official_migpo.json")
