"""Received files land only in the receiving chat's inbox, under names that name exactly one
file there: no path tricks, no look-alikes of the private files, no overwriting, no symlink
followed out of the workspace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from workspace.access import Access
from workspace.media_files import inbox_for, safe_name, save

GROUP_KEY = "group:telegram:-100123"


@pytest.mark.parametrize(
    ("sent", "kept"),
    [
        ("../../etc/passwd", "passwd"),
        ("..\\..\\boot.ini", "boot.ini"),
        ("/abs/report.pdf", "report.pdf"),
        (".hidden", "hidden"),
        ("USER.md", "file"),
        ("ＭＥＭＯＲＹ.md", "file"),  # fullwidth look-alike
        ("bad\u202ename\x00.txt", "badname.txt"),  # bidi override and NUL dropped
        ("", "file"),
    ],
)
def test_a_senders_file_name_is_reduced_to_one_safe_name(sent: str, kept: str) -> None:
    assert safe_name(sent) == kept


def test_long_names_keep_their_extension() -> None:
    name = safe_name("x" * 300 + ".pdf")
    assert len(name) <= 100 and name.endswith(".pdf")


def test_a_groups_file_is_saved_in_its_own_inbox_never_overwriting_and_only_it_may_read_it(tmp_path: Path) -> None:
    first = save(tmp_path, GROUP_KEY, "notes.txt", b"one")
    second = save(tmp_path, GROUP_KEY, "notes.txt", b"two")
    assert first.parent == second.parent == inbox_for(GROUP_KEY)
    assert (first.name, second.name) == ("notes.txt", "notes-2.txt")
    assert (tmp_path / first).read_bytes() == b"one"
    assert Access(GROUP_KEY, "sub").allows(Path(first), "read")
    assert not Access("group:telegram:-100999", "sub").allows(Path(first), "read")
    assert save(tmp_path, "main", "a.txt", b"x").as_posix() == "inbox/a.txt"
    assert not Access(GROUP_KEY, "sub").allows(Path("inbox/a.txt"), "read")


def test_an_inbox_replaced_by_a_symlink_out_of_the_workspace_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "ws"
    (root / inbox_for(GROUP_KEY)).parent.mkdir(parents=True)
    os.symlink(outside, root / inbox_for(GROUP_KEY))
    with pytest.raises(OSError):
        save(root, GROUP_KEY, "x.txt", b"x")
    assert list(outside.iterdir()) == []
