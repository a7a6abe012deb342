"""The inbox's files: raw deliveries appended to segments filled with zeros beforehand.

The webhook inbox (:mod:`ghapp.runtime.inbox`) acknowledges a delivery once its raw body
is durable. Here is where it goes: a folder beside the ledger (``ledger.inbox/``) of
segment files, each :data:`SEGMENT_BYTES` long and written full of zeros (and synced)
before its first record. A group of deliveries is one ``pwritev`` at the segment's end
of data and one ``fdatasync``. Writing over blocks the file already has changes no size
and allocates nothing, so the sync flushes the data and the drive's cache, not the
file system's journal too (measured, bench/README.md: a file that grows with each group
was slower than SQLite's log; written over zeros, 10% faster).

**A record** is a header (a magic word, the payload's length, a sequence number, and an
``xxh3_64`` checksum of the payload seeded with that number), then the payload: when it
was acknowledged, whether the body is a form, the event name, the delivery id, the
content digest and the raw body. Sequence numbers rise through the life of the folder.

**Recovery** reads each segment from its start and stops at the first record that is
not whole: a magic word missing (zeros: the end of what was written), a checksum that
does not match (a group torn by a crash before its sync: never acknowledged), or a
sequence number that does not rise (a record left from before the segment was zeroed,
whose zeros the crash kept from the disk). What it finds is decided again; a record
decided before the crash is a duplicate for the kernel, recorded once.

**Deleting** is zeroing: once every record of a segment is decided (and the ledger's log
synced, see the inbox), the bytes it used are overwritten with zeros, so unredacted text
does not stay in the files, and the segment is used again from its start. The last
segment is zeroed the same way once its records are all decided, so a trickle of
deliveries leaves nothing behind either. At most :data:`SPARES` zeroed segments are kept
for the next burst; the rest are removed once the stream pauses. A group larger than a
segment gets a segment of its own size, removed once decided.

One thread appends, releases and tidies (the inbox's writer); another reads bodies back
(:meth:`SegmentLog.body`, of records not released yet: their segment stays open).
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import xxhash

__all__ = ["SEGMENT_BYTES", "Entry", "Record", "SegmentLog", "segments_path"]

SEGMENT_BYTES = 8 << 20  # a segment's size: about 480 deliveries of the bench's mix
# Zeroed segments kept while the stream pauses (64 MiB; the rest are removed): the next
# burst writes over them instead of filling new ones with zeros first.
SPARES = 8
SUFFIX = ".seg"
MAGIC = b"AIR1"
_HEAD = struct.Struct("<4sIQQ")  # magic, payload length, sequence number, checksum
_META = struct.Struct("<dIIIB")  # acknowledged at, len(name), len(delivery), len(digest), form
_ZEROS = bytes(1 << 20)
_MB = 1 << 20
try:
    _IOV_MAX = max(16, os.sysconf("SC_IOV_MAX"))
except (ValueError, OSError, AttributeError):
    _IOV_MAX = 1024


def segments_path(ledger_file: Path) -> Path:
    """The inbox's folder beside a SQLite ledger: ``ledger.db`` -> ``ledger.inbox/``."""
    return ledger_file.with_name(ledger_file.stem + ".inbox")


@dataclass(slots=True)
class Record:
    """One delivery as read back from a segment."""

    seq: int
    name: str
    delivery: str
    digest: str
    form: bool
    at: float
    body: bytes


@dataclass(slots=True, eq=False)
class _Segment:
    path: Path
    fd: int
    size: int  # bytes of the file
    used: int = 0  # bytes that may hold records (written since it was last zeroed)
    live: int = 0  # records in it not released yet
    unsynced: bool = False  # zeros written and not synced yet


def _checksum(seq: int, payload: bytes | memoryview) -> int:
    return xxhash.xxh3_64_intdigest(payload, seed=seq)


#: What a record holds besides its number and time: (name, delivery, digest, form, body).
Entry = tuple[str, str, str, bool, bytes]


def encode(seq: int, entry: Entry, at: float) -> list[bytes]:
    """One record as the buffers ``pwritev`` writes: header, the fields, the body."""
    name, delivery, digest, form, body = entry
    n, d, g = name.encode(), delivery.encode(), digest.encode()
    meta = _META.pack(at, len(n), len(d), len(g), int(form)) + n + d + g
    h = xxhash.xxh3_64(meta, seed=seq)
    h.update(body)
    head = _HEAD.pack(MAGIC, len(meta) + len(body), seq, h.intdigest())
    return [head, meta, body]


def scan(data: bytes | memoryview, after: int = 0) -> tuple[list[tuple[Record, int, int]], int]:
    """The whole records at the start of a segment's bytes, each with its body's offset
    and length, and where they end. Stops at the first one that is not whole (see the
    module's text)."""
    view = memoryview(data)
    found: list[tuple[Record, int, int]] = []
    off, last = 0, after
    while off + _HEAD.size <= len(view):
        magic, length, seq, check = _HEAD.unpack_from(view, off)
        start = off + _HEAD.size
        if magic != MAGIC or seq <= last or length < _META.size or start + length > len(view):
            break
        payload = view[start : start + length]
        if _checksum(seq, payload) != check:
            break
        at, ln, ld, lg, form = _META.unpack_from(payload)
        strings = _META.size + ln + ld + lg
        if strings > length:
            break
        raw = bytes(payload[_META.size : strings])
        try:
            name, delivery, digest = (
                raw[:ln].decode(),
                raw[ln : ln + ld].decode(),
                raw[ln + ld :].decode(),
            )
        except UnicodeDecodeError:
            break
        body_at = start + strings
        body = bytes(view[body_at : start + length])
        found.append(
            (Record(seq, name, delivery, digest, bool(form), at, body), body_at, len(body))
        )
        off, last = start + length, seq
    return found, off


class SegmentLog:
    """The segments of one inbox folder (see the module's text)."""

    def __init__(self, folder: Path, *, segment_bytes: int = SEGMENT_BYTES) -> None:
        self.folder = folder
        self.segment_bytes = segment_bytes
        self._all: list[_Segment] = []
        self._free: list[_Segment] = []  # zeroed, none of their bytes used
        self._current: _Segment | None = None
        self._where: dict[int, tuple[_Segment, int, int]] = {}  # seq -> segment, body at, length
        self._emptied: list[_Segment] = []  # left with no live record, to be zeroed
        self._seq = 0
        self._names = 0
        # A cap on the files' total size, past which a new segment fails as on a full
        # disk (None: the disk's own limit; the full-disk tests set it).
        self.max_bytes: int | None = None

    # -- opening ---------------------------------------------------------------------------

    def open(self) -> list[Record]:
        """Open the folder (made if missing) and read back every record in it, in the
        order appended. They stay live until released."""
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        found: list[tuple[Record, _Segment, int, int]] = []
        for path in sorted(self.folder.glob("*" + SUFFIX)):
            with contextlib.suppress(ValueError):
                self._names = max(self._names, int(path.stem))
            fd = os.open(path, os.O_RDWR)
            size = os.fstat(fd).st_size
            seg = _Segment(path, fd, size)
            self._all.append(seg)
            data = _read_all(fd, size)
            records, end = scan(data)
            # Bytes past the records that are not zeros (a torn group, an old record):
            # the whole file is zeroed once its records are released.
            seg.used = end if data[end:] == bytes(size - end) else size
            for record, at, length in records:
                found.append((record, seg, at, length))
        found.sort(key=lambda f: f[0].seq)
        for record, seg, at, length in found:
            seg.live += 1
            self._where[record.seq] = (seg, at, length)
            self._seq = max(self._seq, record.seq)
        for seg in self._all:
            if seg.live == 0:
                self._emptied.append(seg)
        self._recycle()
        return [f[0] for f in found]

    # -- appending -------------------------------------------------------------------------

    def append(self, entries: list[Entry], at: float) -> tuple[list[int], _Segment]:
        """Write records after the last ones, not synced yet (:meth:`sync` the segment
        returned): their sequence numbers, and the segment."""
        bufs: list[bytes] = []
        seqs: list[int] = []
        for entry in entries:
            self._seq += 1
            seqs.append(self._seq)
            bufs += encode(self._seq, entry, at)
        total = sum(map(len, bufs))
        seg = self._room(total)
        off = seg.used
        _write_all(seg.fd, bufs, off)
        pos = off
        for seq, i in zip(seqs, range(0, len(bufs), 3), strict=True):
            head, meta, body = bufs[i], bufs[i + 1], bufs[i + 2]
            pos += len(head) + len(meta)
            self._where[seq] = (seg, pos, len(body))
            pos += len(body)
        seg.used = off + total
        seg.live += len(seqs)
        return seqs, seg

    @staticmethod
    def sync(seg: _Segment) -> None:
        os.fdatasync(seg.fd)
        seg.unsynced = False

    def _room(self, total: int) -> _Segment:
        cur = self._current
        if cur is not None and cur.used + total <= cur.size:
            return cur
        if cur is not None and cur.live == 0:  # (empty: zeroed already) take it again
            self._current = None
            if cur.size == self.segment_bytes:
                self._free.append(cur)
            else:
                self._remove(cur)
        if total > self.segment_bytes:  # a segment of its own, removed once released
            seg = self._create(-(-total // _MB) * _MB)
        else:
            seg = self._free.pop() if self._free else self._create(self.segment_bytes)
        self._current = seg
        return seg

    def _create(self, size: int) -> _Segment:
        held = sum(s.size for s in self._all)
        if self.max_bytes is not None and held + size > self.max_bytes:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as a full disk says
        self._names += 1
        path = self.folder / f"{self._names:08d}{SUFFIX}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            written = 0
            while written < size:  # blocks of the file's own, written once
                written += os.pwrite(fd, _ZEROS[: min(len(_ZEROS), size - written)], written)
            os.fdatasync(fd)
            _sync_folder(self.folder)
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                path.unlink()
            raise
        seg = _Segment(path, fd, size)
        self._all.append(seg)
        return seg

    # -- reading, releasing ------------------------------------------------------------------

    def body(self, seq: int) -> bytes:
        """The body of a record not released yet."""
        seg, at, length = self._where[seq]
        return os.pread(seg.fd, length, at)

    def holds(self, seq: int) -> bool:
        return seq in self._where

    def release(self, seqs: list[int]) -> None:
        """These records are decided (and the ledger synced): forget them, and zero each
        segment left with none. Raises OSError when zeroing fails (tried again at the next
        release or :meth:`tidy`; the records are forgotten either way)."""
        for seq in seqs:
            where = self._where.pop(seq, None)
            if where is None:
                continue
            seg = where[0]
            seg.live -= 1
            if seg.live == 0:
                self._emptied.append(seg)
        self._recycle()

    def _recycle(self) -> None:
        while self._emptied:
            seg = self._emptied[-1]
            if seg.live == 0 and seg in self._all:
                self._zero(seg)  # (an error leaves it in the list: tried again)
                if seg.size != self.segment_bytes:  # a group's own: removed
                    if seg is self._current:
                        self._current = None
                    self._remove(seg)
                elif seg is not self._current:
                    self._free.append(seg)
            self._emptied.pop()

    def _zero(self, seg: _Segment) -> None:
        if seg.used == 0:
            return
        written = 0
        while written < seg.used:
            written += os.pwrite(seg.fd, _ZEROS[: min(len(_ZEROS), seg.used - written)], written)
        seg.used = 0
        seg.unsynced = True

    def _remove(self, seg: _Segment) -> None:
        with contextlib.suppress(ValueError):
            self._all.remove(seg)
        with contextlib.suppress(ValueError):
            self._free.remove(seg)
        with contextlib.suppress(OSError):
            os.ftruncate(seg.fd, 0)
        os.close(seg.fd)
        with contextlib.suppress(OSError):
            seg.path.unlink()

    def tidy(self) -> None:
        """The stream paused: sync the zeros written since the last sync, and remove the
        spare segments past :data:`SPARES`."""
        with contextlib.suppress(OSError):
            self._recycle()
        for seg in list(self._all):
            if seg.unsynced:
                with contextlib.suppress(OSError):
                    self.sync(seg)
        while len(self._free) > SPARES:
            self._remove(self._free.pop(0))

    def waiting(self) -> int:
        """Records not released yet."""
        return len(self._where)

    def files(self) -> list[Path]:
        return [s.path for s in self._all]

    def close(self) -> None:
        for seg in self._all:
            if seg.unsynced:
                with contextlib.suppress(OSError):
                    self.sync(seg)
            with contextlib.suppress(OSError):
                os.close(seg.fd)
        self._all, self._free, self._current = [], [], None
        self._where.clear()


def _read_all(fd: int, size: int) -> bytes:
    parts: list[bytes] = []
    got = 0
    while got < size:
        part = os.pread(fd, min(size - got, 16 * _MB), got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def _write_all(fd: int, bufs: list[bytes], off: int) -> None:
    """``pwritev`` until all is written (a write may be short), at most IOV_MAX a call."""
    most = _IOV_MAX
    pending = [memoryview(b) for b in bufs if b]
    while pending:
        chunk = pending[:most]
        n = os.pwritev(fd, chunk, off)
        if n <= 0:
            raise OSError(errno.EIO, "the inbox's file took no bytes")
        off += n
        while n and pending:
            first = pending[0]
            if n >= len(first):
                n -= len(first)
                pending.pop(0)
            else:
                pending[0] = first[n:]
                n = 0


def _sync_folder(folder: Path) -> None:
    """Make a new file's name durable (where the system allows opening a folder)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
