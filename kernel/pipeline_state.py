"""The fold of pipeline facts: one small function per fact, as in :mod:`kernel.state`.

Kept apart from :mod:`kernel.state` only for size; :data:`kernel.state.FOLD` lists them.
"""

from __future__ import annotations

import dataclasses

from kernel import facts as f
from kernel.errors import MissingRecord
from kernel.lifecycle import NEW, move
from kernel.records import Key, Pipeline, State

__all__ = ["pipeline_advanced", "pipeline_woken"]


def pipeline_advanced(st: State, fact: f.PipelineAdvanced) -> set[Key]:
    before = st.pipelines.get(fact.pipeline)
    label = "PipelineAdvanced:ended" if fact.ended else "PipelineAdvanced"
    if fact.restarted:
        label += ":restarted"
    was = NEW if before is None else ("ended" if before.ended else "active")
    noted = before is not None and before.ended and fact.ended and not fact.restarted
    move("pipeline", fact.pipeline, was, label)
    return {
        st.put(
            Pipeline(
                id=fact.pipeline,
                subject=fact.subject,
                stage=fact.stage,
                data=fact.data,
                wake_at="" if fact.ended else fact.wake_at,
                version=fact.version,
                ended=fact.ended,
                cards=fact.cards,
                started_at=fact.at if before is None or fact.restarted else before.started_at,
                # a note on an ended pipeline: it still ended when it ended
                updated_at=before.updated_at if before is not None and noted else fact.at,
            )
        )
    }


def pipeline_woken(st: State, fact: f.PipelineWoken) -> set[Key]:
    p = st.pipelines.get(fact.pipeline)
    if p is None:
        raise MissingRecord("pipeline", fact.pipeline)
    move("pipeline", p.id, "ended" if p.ended else "active", "PipelineWoken")
    # A new version: a decision made before this (on what it did not know) is stale.
    return {st.put(dataclasses.replace(p, wake_at=fact.at, version=p.version + 1))}
