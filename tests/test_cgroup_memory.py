"""This process's cgroup memory limit, read from a fake /proc/self/cgroup and cgroup tree; one
cgroup's memory files, as `pacer settle` samples them."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from pacer.host.cgroup import (
    CgroupLimit,
    own_cgroup,
    read_cgroup,
    read_cgroup_limit,
    read_memory_stat,
)
from tests.servers import fake_host

GIB = 2**30
Limits = dict[str, tuple[int | str, int]]


def limit_of(tmp_path: Path, cgroup: str, limits: Limits) -> CgroupLimit | None:
    files = fake_host(tmp_path, total=64 * GIB, available=32 * GIB, cgroup=cgroup, limits=limits)
    return read_cgroup_limit(files.self_cgroup, files.cgroup_root)


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({"/system.slice/pacer.service": (8 * GIB, GIB)}, ("/system.slice/pacer.service", 7)),
        (
            {"/system.slice": (8 * GIB, 6 * GIB), "/system.slice/pacer.service": (7 * GIB, GIB)},
            ("/system.slice", 2),
        ),  # the parent's limit, shared with its other units, binds
        (
            {"/system.slice": (16 * GIB, 2 * GIB), "/system.slice/pacer.service": (4 * GIB, GIB)},
            ("/system.slice/pacer.service", 3),
        ),
        ({"/": (4 * GIB, 3 * GIB), "/system.slice/pacer.service": ("max", 0)}, ("/", 1)),
    ],
    ids=["own", "parent-tighter", "own-tighter", "namespace-root"],
)
def test_the_tightest_limit_of_the_cgroup_and_its_ancestors_wins(
    tmp_path: Path, limits: Limits, expected: tuple[str, int]
) -> None:
    found = limit_of(tmp_path, "/system.slice/pacer.service", limits)
    assert found is not None
    assert (found.path, found.room_bytes // GIB) == expected


def test_a_cgroup_over_its_limit_has_no_room(tmp_path: Path) -> None:
    found = limit_of(tmp_path, "/pacer", {"/pacer": (4 * GIB, 5 * GIB)})
    assert found == CgroupLimit("/pacer", 4 * GIB, 5 * GIB)
    assert found.room_bytes == 0


@pytest.mark.parametrize(
    "limits",
    [
        {},  # no memory.max anywhere: the host's root cgroup has none
        {"/system.slice": ("max", GIB), "/system.slice/pacer.service": ("max", GIB)},
        {"/system.slice/pacer.service": ("8G", GIB)},  # not a number
    ],
    ids=["no-files", "max", "unreadable"],
)
def test_no_limit_where_none_is_set_or_readable(
    tmp_path: Path, limits: Limits, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="pacer.service"):
        assert limit_of(tmp_path, "/system.slice/pacer.service", limits) is None
    [said] = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert said.getMessage().startswith("no cgroup memory limit: none under")


def test_cgroup_v1_or_no_cgroup_file_is_no_limit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    v1 = tmp_path / "cgroup-v1"
    v1.write_text("4:memory:/pacer\n1:cpu:/\n")
    limits = tmp_path / "fs"
    (limits / "pacer").mkdir(parents=True)
    (limits / "pacer" / "memory.max").write_text(f"{GIB}\n")
    (limits / "pacer" / "memory.current").write_text("0\n")
    with caplog.at_level(logging.DEBUG, logger="pacer.service"):
        assert read_cgroup_limit(v1, limits) is None
        assert read_cgroup_limit(tmp_path / "absent", limits) is None
    said = [r.getMessage() for r in caplog.records]
    assert said[0] == f"no cgroup memory limit: {v1} names no cgroup v2 (0::)"
    assert said[1].startswith("no cgroup memory limit: [Errno 2]")


def test_one_cgroups_files_are_read_by_its_path(tmp_path: Path) -> None:
    limits: Limits = {
        "/system.slice": ("max", 9 * GIB),
        "/system.slice/pacer.service": (8 * GIB, GIB),
    }
    files = fake_host(tmp_path, total=64 * GIB, available=32 * GIB,
                      cgroup="/system.slice/pacer.service", limits=limits)  # fmt: skip
    assert own_cgroup(files.self_cgroup) == "/system.slice/pacer.service"
    assert read_cgroup("/system.slice/pacer.service", files.cgroup_root) == CgroupLimit(
        "/system.slice/pacer.service", 8 * GIB, GIB
    )
    assert read_cgroup("/system.slice", files.cgroup_root) is None  # "max": no limit
    assert read_cgroup("/elsewhere", files.cgroup_root) is None
    stat = files.cgroup_root / "system.slice" / "pacer.service" / "memory.stat"
    stat.write_text("anon 4096\nshmem 25165824\npgfault 17\nnot-a-number x\n")
    assert read_memory_stat("/system.slice/pacer.service", files.cgroup_root) == {
        "anon": 4096,
        "shmem": 24 * 2**20,
        "pgfault": 17,
    }
    assert read_memory_stat("/system.slice", files.cgroup_root) == {}  # no memory.stat
    files.self_cgroup.write_text("4:memory:/pacer\n")
    assert own_cgroup(files.self_cgroup) is None
