"""The inbox's segment files: what was synced is read back whole, a torn or stale record
is not, and what is released is zeroed.

Real files in a temporary folder; a crash is what the disk may hold after one: the bytes
past the last sync torn, or zeros that never reached it.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ghapp.runtime import segments
from ghapp.runtime.segments import Entry, SegmentLog, scan

KB = 1024


def entry(n: int, size: int = 300) -> Entry:
    body = (b'{"n": %d, "text": "' % n) + b"x" * size + b'"}'
    return ("issues", f"d-{n}", f"digest-{n}", n % 2 == 1, body)


def write(log: SegmentLog, entries: list[Entry], at: float = 1.0) -> list[int]:
    seqs, seg = log.append(entries, at)
    log.sync(seg)
    return seqs


def reopen(folder: Path, **kw: int) -> tuple[SegmentLog, list[segments.Record]]:
    log = SegmentLog(folder, **kw)
    return log, log.open()


def all_zeros(folder: Path) -> bool:
    return all(not any(p.read_bytes()) for p in folder.iterdir())


def test_what_was_synced_is_read_back_in_order_with_every_field(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path / "in")
    assert log.open() == []
    first = write(log, [entry(1), entry(2)], at=5.5)
    second = write(log, [entry(3)], at=6.5)
    assert first == [1, 2] and second == [3]
    assert log.body(2) == entry(2)[4]
    log.close()

    again, records = reopen(tmp_path / "in")
    assert [r.body for r in records] == [b"", b"", b""]  # read back one at a time
    assert [(r.seq, r.name, r.delivery, r.digest, r.form, again.body(r.seq)) for r in records] == [
        (n, *entry(n)) for n in (1, 2, 3)
    ]
    assert [r.at for r in records] == [5.5, 5.5, 6.5]
    assert again.waiting() == 3 and again.body(3) == entry(3)[4]
    assert write(again, [entry(4)]) == [4]  # numbers keep rising after a restart
    again.close()


def test_a_group_torn_by_a_crash_is_not_read_back_and_what_came_before_is(
    tmp_path: Path,
) -> None:
    log = SegmentLog(tmp_path / "in")
    log.open()
    write(log, [entry(1), entry(2)])
    _, seg = log.append([entry(3, size=3000)], 1.0)  # crashed before its sync:
    path, end = seg.path, seg.used
    log.close()
    with path.open("r+b") as f:  # the disk kept only part of it, a sector of zeros inside
        f.seek(end - 1500)
        f.write(bytes(512))
    again, records = reopen(tmp_path / "in")
    assert [r.delivery for r in records] == ["d-1", "d-2"]
    again.release([1, 2])
    again.close()
    assert all_zeros(tmp_path / "in")  # the torn bytes too


def test_a_flipped_bit_ends_what_is_read_back(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path / "in")
    log.open()
    write(log, [entry(1), entry(2), entry(3)])
    data = bytearray(log.files()[0].read_bytes())
    log.close()
    _, second_body, _ = scan(data)[0][1]
    data[second_body + 10] ^= 0x01
    (tmp_path / "in" / "00000001.seg").write_bytes(bytes(data))
    _, records = reopen(tmp_path / "in")
    assert [r.delivery for r in records] == ["d-1"]


def test_a_record_left_from_before_the_zeroing_is_not_read_back(tmp_path: Path) -> None:
    """The zeros over released records had not reached the disk when it crashed: the old
    records after the new ones are there again, one starting where the new ones end."""
    log = SegmentLog(tmp_path / "in")
    log.open()
    write(log, [entry(1), entry(2), entry(3)])
    path = log.files()[0]
    old = path.read_bytes()
    log.release([1, 2, 3])  # zeroed, and the next group is written from the start
    assert not any(path.read_bytes())
    write(log, [entry(4)])  # the same size as entry(1): entry(2)'s old bytes follow it
    new_end = len(b"".join(segments.encode(4, entry(4), 1.0)))
    log.close()
    data = bytearray(path.read_bytes())
    data[new_end:] = old[new_end:]
    path.write_bytes(bytes(data))
    assert [r[0].seq for r in scan(old)[0]] == [1, 2, 3]
    _, records = reopen(tmp_path / "in")
    assert [r.delivery for r in records] == ["d-4"]  # seq 2 after seq 4: stale, not read


def test_released_records_are_zeroed_and_the_segment_used_again(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path / "in")
    log.open()
    seqs = write(log, [entry(n) for n in range(1, 6)])
    log.release(seqs[:4])
    assert entry(1)[4] in log.files()[0].read_bytes()  # one is left: nothing zeroed yet
    log.release(seqs[4:])
    assert not any(log.files()[0].read_bytes())
    write(log, [entry(6)])
    assert len(log.files()) == 1
    log.close()


def test_a_stream_rolls_over_segments_and_keeps_at_most_its_spares_zeroed(
    tmp_path: Path,
) -> None:
    log = SegmentLog(tmp_path / "in", segment_bytes=16 * KB, spare_bytes=32 * KB)
    log.open()
    pairs = [[entry(2 * n, size=2000), entry(2 * n + 1, size=2000)] for n in range(40)]
    seqs = [s for pair in pairs for s in write(log, pair)]
    assert len(log.files()) >= 10  # 80 records of about 2 KiB, 16 KiB a segment
    assert all(p.stat().st_size == 16 * KB for p in log.files())  # written over, never grown
    _, records = reopen(tmp_path / "in", segment_bytes=16 * KB)
    assert [r.seq for r in records] == seqs  # in order across segments

    log.release(seqs)
    log.maintain(ready=0)  # (what the segments' thread does)
    assert len(log.files()) == 3  # two spares of 16 KiB, and the one written to now
    assert all_zeros(tmp_path / "in")
    assert write(log, [entry(100, size=9000)]) == [81]  # the last one, from its start
    assert len(log.files()) == 3
    log.close()


def test_the_first_segment_is_small_and_each_one_made_after_twice_the_last(
    tmp_path: Path,
) -> None:
    log = SegmentLog(tmp_path / "in")
    log.open()
    for n in range(1, 100):  # 20 MiB
        write(log, [entry(n, size=200 * KB)])
    sizes = [p.stat().st_size // (1024 * KB) for p in log.files()]
    assert sizes[:4] == [1, 2, 4, 8] and set(sizes[4:]) == {8}  # MiB
    log.close()


def test_a_trickle_keeps_one_small_file_zeroed_between_deliveries(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path / "in")
    log.open()
    for n in range(1, 200):  # decided (released) before the next one comes
        log.release(write(log, [entry(n, size=5000)]))
    assert [p.stat().st_size for p in log.files()] == [1024 * KB]
    assert all_zeros(tmp_path / "in")
    log.close()


def test_a_group_larger_than_a_segment_gets_one_of_its_own_removed_once_released(
    tmp_path: Path,
) -> None:
    log = SegmentLog(tmp_path / "in", segment_bytes=16 * KB)
    log.open()
    write(log, [entry(1)])
    big = write(log, [entry(2, size=40 * KB)])
    sizes = sorted(p.stat().st_size for p in log.files())
    assert sizes == [16 * KB, 1024 * KB]  # rounded up to a MiB
    assert log.body(big[0]) == entry(2, size=40 * KB)[4]
    log.release(big)
    log.maintain(ready=0)
    assert [p.stat().st_size for p in log.files()] == [16 * KB]
    log.close()


def test_past_its_size_limit_a_new_segment_is_refused_as_a_full_disk(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path / "in", segment_bytes=16 * KB)
    log.open()
    log.max_bytes = 32 * KB
    write(log, [entry(1, size=12 * KB)])
    write(log, [entry(2, size=12 * KB)])
    with pytest.raises(OSError) as err:
        log.append([entry(3, size=12 * KB)], 1.0)
    assert err.value.errno == errno.ENOSPC
    log.release([1])  # space again: the first segment is zeroed and taken
    log.maintain(ready=0)
    assert write(log, [entry(4, size=12 * KB)]) == [4]  # (3 was used by the refused one)
    log.close()
    _, records = reopen(tmp_path / "in", segment_bytes=16 * KB)
    assert [r.delivery for r in records] == ["d-2", "d-4"]


def test_a_zeroing_that_fails_is_tried_again_and_nothing_is_left_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = SegmentLog(tmp_path / "in", segment_bytes=16 * KB)
    log.open()
    first = write(log, [entry(1, size=12 * KB)])
    write(log, [entry(2, size=12 * KB)])  # the first segment is left for a second one
    log.release(first)
    real = os.pwrite
    calls = {"n": 0}

    def failing(fd: int, data: bytes, offset: int) -> int:
        calls["n"] += 1
        raise OSError(errno.EIO, "the disk is gone for a moment")

    monkeypatch.setattr(segments.os, "pwrite", failing)  # the zeros are not written
    with pytest.raises(OSError):
        log.maintain(ready=0)
    assert calls["n"] == 1
    first_file = sorted(log.files())[0]
    assert entry(1, size=12 * KB)[4] in first_file.read_bytes()
    monkeypatch.setattr(segments.os, "pwrite", real)
    log.maintain(ready=0)  # the next try zeroes it
    assert not any(first_file.read_bytes())
    log.close()


# -- what a crash may leave, at random --------------------------------------------------


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(
        st.tuples(
            st.integers(1, 4),  # records in the group
            st.integers(0, 3000),  # body size
            st.floats(0, 1),  # share of what waits to release first
        ),
        min_size=1,
        max_size=25,
    ),
    tear=st.integers(0, 2**32),
    zeros_lost=st.booleans(),
)
def test_after_a_crash_every_synced_record_not_released_is_read_back_whole(
    tmp_path: Path, steps: list[tuple[int, int, float]], tear: int, zeros_lost: bool
) -> None:
    folder = tmp_path / f"in-{random.getrandbits(64):x}"
    log = SegmentLog(folder, segment_bytes=8 * KB)
    log.open()
    rng = random.Random(tear)
    bodies: dict[int, bytes] = {}
    live: list[int] = []
    n = 0
    before: dict[Path, bytes] = {}  # the files before the last release (its zeros lost)
    for count, size, share in steps:
        group = []
        for _ in range(count):
            n += 1
            group.append(entry(n, size=size + rng.randrange(50)))
        seqs = write(log, group)
        bodies.update({s: e[4] for s, e in zip(seqs, group, strict=True)})
        live += seqs
        release = live[: int(len(live) * share)]
        before = {p: p.read_bytes() for p in log.files()}
        log.release(release)
        log.maintain(ready=0)  # (what the segments' thread does, here at once)
        live = live[len(release) :]
    # the crash: a last group written and not synced, torn at random (sectors of it
    # zeros), and the process gone without closing anything
    last = entry(n + 1, size=rng.randrange(4000))
    seqs, seg = log.append([last], 1.0)
    torn_path, end = seg.path, seg.used
    start = end - len(b"".join(segments.encode(seqs[0], last, 1.0)))
    for s in log._all:
        os.close(s.fd)
    torn = bytearray(torn_path.read_bytes())
    for sector in range(start // 512 * 512, end, 512):
        if rng.random() < 0.5:  # this sector not written (what it held before: synced)
            lo, hi = max(sector, start), min(sector + 512, end)
            torn[lo:hi] = bytes(hi - lo)
    torn_path.write_bytes(bytes(torn))
    if zeros_lost:  # the zeros of the last release never reached the disk
        for path, old in before.items():
            if path.exists() and path != torn_path:
                data = path.read_bytes()
                if not any(data) and len(old) == len(data):
                    path.write_bytes(old)

    again = SegmentLog(folder, segment_bytes=8 * KB)
    records = again.open()
    got = {r.seq: again.body(r.seq) for r in records}
    for seq in live:
        assert got.get(seq) == bodies[seq], f"record {seq}, synced and not released, lost"
    for seq, body in got.items():  # nothing made up: each one as it was written
        assert bodies.get(seq, body) == body
        assert seq in bodies or seq == n + 1
    assert [r.seq for r in records] == sorted(got)
    again.release(list(got))
    again.maintain(ready=0)
    again.tidy()
    assert all(not any(p.read_bytes()) for p in folder.iterdir())
    again.close()
    shutil.rmtree(folder)


def test_descriptors_are_closed(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path / "in", segment_bytes=16 * KB)
    log.open()
    write(log, [entry(1)])
    fds = [s.fd for s in log._all]
    log.close()
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)
