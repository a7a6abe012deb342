"""When a label restarts a delivery that ended: the one rule the App and the Action share."""

from __future__ import annotations

import pytest

from ghapp.github.trigger import added_after

END = "2026-11-30T09:00:05.750000+00:00"  # the runner's own clock, to the microsecond


@pytest.mark.parametrize(
    ("at", "ended_at", "want"),
    [
        ("2026-11-30T09:00:06Z", END, True),  # after the end
        ("2026-11-30T09:00:05Z", END, True),  # GitHub's second of the end: after it
        ("2026-11-30T09:00:04Z", END, False),  # before the end: a re-run, a restart
        ("2026-11-30T09:00:04Z", "2026-11-30T09:00:05Z", False),  # both GitHub's
        ("2026-11-30T10:00:04+01:00", END, False),  # another zone, the same instant
        ("", END, None),  # when the label was added is unknown
        ("2026-11-30T09:00:06Z", "", None),  # a run recorded without its end
        ("yesterday", END, None),
        ("2026-11-30T09:00:06", END, None),  # no zone: no order with an aware instant
    ],
)
def test_a_label_counts_after_an_end_at_its_second(at: str, ended_at: str, want: bool) -> None:
    assert added_after(at, ended_at) is want
