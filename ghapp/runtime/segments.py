"""The inbox's files: raw deliveries appended to segments filled with zeros beforehand.

The webhook inbox (:mod:`ghapp.runtime.inbox`) acknowledges a delivery once its raw body
is durable. Here is where it goes: a folder beside the ledger (``ledger.inbox/``) of
segment files, each written full of zeros (and synced) before its first record. A
group of deliveries is one ``pwritev`` at the segment's end of data and one
``fdatasync``. Writing over blocks the file already has changes no size and allocates
nothing, so the sync flushes the data and the drive's cache, not the file system's
journal too (measured, bench/README.md: a file that grows with each group was slower
than SQLite's log; written over zeros, 10% faster).

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

**Deleting** comes once every record of a segment is decided (and the ledger's log
synced, see the inbox): the segment is overwritten with zeros and synced, a MiB at a
time, by a thread of its own, and kept for the next burst, up to :data:`SPARE_BYTES` of
them; past that it is truncated and removed. Either way unredacted text does not stay in
the files. The segment written to now is zeroed by the writer as soon as its records
are all decided, while it is small (:data:`INLINE_ZERO`: a trickle of deliveries), and
written again from its start. The first segment is small (:data:`FIRST_BYTES`), each
one made after it twice the last, up to :data:`SEGMENT_BYTES`: a home that gets a few
webhooks an hour holds one small file, a busy one a few large ones. Once the stream has
filled a segment, the thread keeps :data:`READY` segments made ahead of need, so the
ack path rarely waits for zeros to be written. A group larger than a segment gets one
of its own size.

One thread appends and releases (the inbox's writer), another reads bodies back
(:meth:`SegmentLog.body`, of records not released yet: their segment stays open), and
the segments' own thread zeroes, removes and makes segments.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

import xxhash

__all__ = ["SEGMENT_BYTES", "SPARE_BYTES", "Entry", "Record", "SegmentLog", "segments_path"]

SEGMENT_BYTES = 8 << 20  # the largest segment: about 480 deliveries of the bench's mix
# Zeroed segments kept while the stream pauses (at most SPARE_BYTES; the rest are
# removed): the next burst writes over them instead of filling new ones with zeros.
SPARE_BYTES = 64 << 20
FIRST_BYTES = 1 << 20  # the first segment's size; each one made after is twice the last
READY = 2  # zeroed segments made ahead of need, once the stream has filled one
INLINE_ZERO = 256 << 10  # the last segment's records, zeroed by the writer up to this size
SUFFIX = ".seg"
MAGIC = b"AIR1"
_HEAD = struct.Struct("<4sIQQ")  # magic, payload length, sequence number, checksum
_META = struct.Struct("<dIIIB")  # acknowledged at, len(name), len(delivery), len(digest), form
_ZEROS = bytes(1 << 20)
log = logging.getLogger("autoloop.inbox")
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
    """The segments of one inbox folder (see the module's text).

    The writer thread appends and releases; the translator reads bodies; a thread of
    its own (:meth:`start`) zeroes and syncs emptied segments and fills new ones with
    zeros ahead of need, so that neither waits for that in the ack path.
    """

    def __init__(
        self,
        folder: Path,
        *,
        segment_bytes: int = SEGMENT_BYTES,
        spare_bytes: int = SPARE_BYTES,
    ) -> None:
        self.folder = folder
        self.segment_bytes = segment_bytes  # the largest a segment is made (but for a group)
        self.spare_bytes = spare_bytes
        self._next_bytes = min(FIRST_BYTES, segment_bytes)
        self._rolled = False  # a segment was filled: keep READY made ahead from then on
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # wakes the maintenance thread
        self._all: list[_Segment] = []  # every open segment   (these four: under _lock)
        self._free: list[_Segment] = []  # zeroed and synced, none of their bytes used
        self._emptied: list[_Segment] = []  # no live record left: to zero, or remove
        self._current: _Segment | None = None  # where the writer appends
        self._where: dict[int, tuple[_Segment, int, int]] = {}  # seq -> segment, body at, length
        self._seq = 0
        self._names = 0
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.closed = False
        # A cap on the files' total size, past which a new segment fails as on a full
        # disk (None: the disk's own limit; the full-disk tests set it).
        self.max_bytes: int | None = None

    # -- opening, closing --------------------------------------------------------------------

    def open(self) -> list[Record]:
        """Open the folder (made if missing) and read back every record in it, in the
        order appended, without their bodies (read one with :meth:`body`: a backlog
        left by a crash is not held in memory at once). They stay live until released."""
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
            # the whole file is zeroed (or removed) once its records are released.
            seg.used = end if data[end:] == bytes(size - end) else size
            for record, at, length in records:
                record.body = b""  # (checked whole by the scan; read back when due)
                found.append((record, seg, at, length))
            del data, records
        found.sort(key=lambda f: f[0].seq)
        for record, seg, at, length in found:
            seg.live += 1
            self._where[record.seq] = (seg, at, length)
            self._seq = max(self._seq, record.seq)
        self._emptied = [seg for seg in self._all if seg.live == 0]
        return [f[0] for f in found]

    def start(self) -> None:
        """Zero or remove what :meth:`open` found emptied, then keep doing it (and keep
        segments ready) in a thread of its own."""
        self.maintain()
        self._thread = threading.Thread(
            target=self._maintain_loop, name="inbox-segments", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Stop the thread, zero or remove what is emptied, sync, close."""
        with self._work:
            self._stopping = True
            self._work.notify_all()
        if self._thread is not None:
            self._thread.join(30)
        with contextlib.suppress(OSError):
            self.maintain(ready=0)
        self.closed = True  # (read by the translator: no body can be read from here on)
        for seg in self._all:
            if seg.unsynced:
                with contextlib.suppress(OSError):
                    self.sync(seg)
            with contextlib.suppress(OSError):
                os.close(seg.fd)
        self._all, self._free, self._emptied, self._current = [], [], [], None
        self._where.clear()

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
        with self._work:
            if cur is not None:
                self._rolled = True
                if cur.live == 0:  # full of released records: the thread's now
                    self._emptied.append(cur)
            self._current = None
            seg = next((f for f in reversed(self._free) if f.size >= total), None)
            if seg is not None:
                self._free.remove(seg)
            self._work.notify_all()  # (ready segments taken, or one emptied)
        if seg is None:  # none ready (or a group larger than a segment): made here
            size = self._grow()
            seg = self._create(size if total <= size else -(-total // _MB) * _MB)
        self._current = seg
        return seg

    def _grow(self) -> int:
        """The size of the next segment made: the first small, each twice the last, up
        to :attr:`segment_bytes` (a trickle of deliveries never needs more than one)."""
        with self._lock:
            size = self._next_bytes
            self._next_bytes = min(self.segment_bytes, size * 2)
        return size

    def _create(self, size: int) -> _Segment:
        """A new segment, written full of zeros and synced (its blocks its own)."""
        with self._lock:
            held = sum(s.size for s in self._all)
            if self.max_bytes is not None and held + size > self.max_bytes:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as a full disk says
            self._names += 1
            path = self.folder / f"{self._names:08d}{SUFFIX}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            _zero_range(fd, size, sync_each=False)
            os.fdatasync(fd)
            _sync_folder(self.folder)
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                path.unlink()
            raise
        seg = _Segment(path, fd, size)
        with self._lock:
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
        """These records are decided (and the ledger synced): forget them. A segment left
        with none is zeroed: the one written to now here, when what it used is small (a
        trickle: it is written again from its start); any other by the thread of its
        own. Raises OSError when zeroing here fails (the records are forgotten; the
        segment is zeroed once it is left)."""
        gone = [seq for seq in seqs if seq in self._where]
        emptied: list[_Segment] = []
        for seq in gone:
            seg = self._where[seq][0]
            seg.live -= 1
            if seg.live == 0:
                emptied.append(seg)
        try:
            cur = self._current
            if (
                cur is not None
                and cur in emptied
                and cur.used <= INLINE_ZERO
                and cur.size <= self.segment_bytes
            ):
                emptied.remove(cur)
                _zero_range(cur.fd, cur.used, sync_each=False)
                cur.used = 0
                cur.unsynced = True  # (synced with the next group, or at the pause)
        finally:
            for seq in gone:  # forgotten once zeroed here: waiting() counts them till then
                del self._where[seq]
            if emptied:
                with self._work:
                    for seg in emptied:
                        if seg is self._current:
                            self._current = None  # (a large one: the next group takes another)
                        self._emptied.append(seg)
                    self._work.notify_all()

    # -- the thread of its own ---------------------------------------------------------------

    def _maintain_loop(self) -> None:
        failing = False
        while True:
            with self._work:
                while not self._stopping and not self._maintenance_due():
                    self._work.wait(1.0)
                if self._stopping:
                    return
            try:
                self.maintain()
            except OSError as exc:  # (a full disk: the ack path answers 503 meanwhile)
                if not failing:
                    log.warning("inbox segments cannot be made or zeroed: %s (tried again)", exc)
                failing = True
                with self._work:
                    self._work.wait(1.0)
            else:
                if failing:
                    log.info("inbox segments are made and zeroed again")
                failing = False

    def _maintenance_due(self) -> bool:
        return bool(self._emptied) or (self._rolled and len(self._free) < READY)

    def maintain(self, ready: int = READY) -> None:
        """Zero and sync each emptied segment kept as a spare (at most
        :attr:`spare_bytes` of them), remove the others (truncated: their text is in no
        file), and, once the stream has filled a segment, make segments until ``ready``
        wait for the writer."""
        while True:
            with self._lock:
                seg = next((s for s in self._emptied if s.live == 0), None)
                if seg is None:
                    self._emptied = [s for s in self._emptied if s.live == 0]
                    break
                self._emptied.remove(seg)
                spare = sum(f.size for f in self._free)
                keep = seg.size <= self.segment_bytes and spare + seg.size <= self.spare_bytes
            if keep:
                try:
                    _zero_range(seg.fd, seg.used, sync_each=True)
                    os.fdatasync(seg.fd)
                except OSError:
                    with self._lock:  # (its text stays until a later try zeroes it)
                        self._emptied.append(seg)
                    raise
                seg.used = 0
                seg.unsynced = False
                with self._lock:
                    self._free.append(seg)
            else:
                self._remove(seg)
        while self._rolled and len(self._free) < ready and not self._stopping:
            seg = self._create(self._grow())
            with self._lock:
                self._free.append(seg)

    def _remove(self, seg: _Segment) -> None:
        with self._lock:
            with contextlib.suppress(ValueError):
                self._all.remove(seg)
            with contextlib.suppress(ValueError):
                self._free.remove(seg)
        with contextlib.suppress(OSError):
            os.ftruncate(seg.fd, 0)
        with contextlib.suppress(OSError):
            os.close(seg.fd)
        with contextlib.suppress(OSError):
            seg.path.unlink()

    def tidy(self) -> None:
        """The stream paused: sync the zeros written here since the last sync."""
        cur = self._current
        if cur is not None and cur.unsynced:
            with contextlib.suppress(OSError):
                self.sync(cur)

    def waiting(self) -> int:
        """Records not released yet (a release counts until its zeros are written here)."""
        return len(self._where)

    def files(self) -> list[Path]:
        with self._lock:
            return [s.path for s in self._all]


def _zero_range(fd: int, size: int, *, sync_each: bool) -> None:
    """Write zeros over the first ``size`` bytes, a MiB at a time (synced after each
    when ``sync_each``: the disk then never has more than a MiB of them to write at
    once, beside the ack path's syncs)."""
    written = 0
    while written < size:
        written += os.pwrite(fd, _ZEROS[: min(len(_ZEROS), size - written)], written)
        if sync_each and written < size:
            os.fdatasync(fd)


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
