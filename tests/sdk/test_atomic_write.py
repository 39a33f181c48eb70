"""``atomic_write`` / ``atomic_writer``: the file holds the old contents or the new ones, never
a mix, and a failed write leaves nothing behind. (A SIGKILL mid-save, in a real process:
test_stop_save.py.)"""

from __future__ import annotations

import os
import stat

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ckpt_preempt_sdk as sdk


class Interrupted(Exception):
    pass


@settings(max_examples=60, deadline=None)
@given(old=st.binary(max_size=2048), chunks=st.lists(st.binary(max_size=512), max_size=6),
       fail_after=st.one_of(st.none(), st.integers(min_value=0, max_value=6)))
def test_the_file_is_the_old_one_or_the_whole_new_one(tmp_path_factory, old, chunks,
                                                       fail_after):
    d = tmp_path_factory.mktemp("w")
    path = d / "ckpt.bin"
    sdk.atomic_write(path, old)
    failed = fail_after is not None and fail_after < len(chunks)
    try:
        with sdk.atomic_writer(path) as f:
            for i, chunk in enumerate(chunks):
                if failed and i == fail_after:
                    raise Interrupted
                f.write(chunk)
    except Interrupted:
        pass
    assert path.read_bytes() == (old if failed else b"".join(chunks))
    assert [p.name for p in d.iterdir()] == ["ckpt.bin"]  # no temporary file left


def test_text_and_bytes_and_the_umask_decides_the_mode(tmp_path):
    sdk.atomic_write(tmp_path / "a", "héllo")
    sdk.atomic_write(tmp_path / "b", b"\x00\x01")
    assert (tmp_path / "a").read_text(encoding="utf-8") == "héllo"
    assert (tmp_path / "b").read_bytes() == b"\x00\x01"
    old = os.umask(0o027)
    try:
        sdk.atomic_write(tmp_path / "c", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "c").stat().st_mode) == 0o640


def test_a_bad_mode_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="mode must be"), sdk.atomic_writer(tmp_path / "x", "a"):
        pass
    assert list(tmp_path.iterdir()) == []


def test_fsync_tree_reaches_every_file(tmp_path):
    (tmp_path / "step-1/sub").mkdir(parents=True)
    (tmp_path / "step-1/__0_0.distcp").write_bytes(b"x")
    (tmp_path / "step-1/sub/.metadata").write_bytes(b"y")
    sdk.fsync_tree(tmp_path / "step-1")  # raises on a file it cannot open
