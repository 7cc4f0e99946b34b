"""What one decision pass has learnt about its leaves, kept while it stays true in that pass.

What it does: ``PassMemo`` answers two questions a pass asks of a leaf again and again while
it walks the leaf's queue, once per leaf and shape instead of once per candidate:
- ``gates``: the gates that may pass over a workload of the leaf (``chain.passing_over``);
  what they read (held leaves, spent budgets, the tree, the engine's zones) does not change
  during a pass, so the answer stands for the whole pass;
- ``within``: whether a shape asks within the leaf's guarantee (``within_min``): it reads the
  leaf's own usage only, so it stands until the pass admits into that leaf (``admitted``);
- ``dead``: a shape that neither fits the leaf's quota nor asks within its guarantee. Within a
  pass usage only grows -- until a preemption or a preemptor's hold let go lowers it -- and
  neither answer can turn back to yes while it grows, so the pass ``forget``s both memos
  exactly there. A workload of a dead shape that is plain (not held, not scalable) and whose leaf
  cannot preempt beyond its guarantee (``refusals.preempts_beyond_guarantee``) fails its
  try with nothing changed: ``hopeless`` says so without trying.
Where idle guarantee is kept from lending (L1, L2: ``tree.reserving``) a shape that does not fit
may fit after others grow, so nothing is remembered there.
What it must never do: outlive its pass (it is built per pass, so a snapshot never sees it),
remember an answer that usage going down could change without being forgotten, or decide
anything (it only spares the pass asking the same question twice).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from schemas import QuotaPath
from usher.core.engine.refusals import preempts_beyond_guarantee
from usher.core.gates import chain
from usher.core.gates.view import Gate
from usher.core.state.indexed import Job, QuotaNodeInfo, Shape

if TYPE_CHECKING:
    from usher.core.engine.context import EngineContext


class PassMemo:
    """Per leaf, the gates that may pass over its workloads and the shapes that cannot move."""

    def __init__(self, engine: EngineContext) -> None:
        self.e = engine
        self.remembers = not engine.state.tree.reserving
        self.gates_of: dict[QuotaPath, tuple[Gate, ...]] = {}
        self.dead_shapes: dict[QuotaPath, set[Shape]] = {}
        self.within_shapes: dict[QuotaPath, dict[Shape, bool]] = {}

    def gates(self, leaf: QuotaPath) -> tuple[Gate, ...]:
        """``chain.passing_over`` of ``leaf``, asked once per pass."""
        found = self.gates_of.get(leaf)
        if found is None:
            found = self.gates_of[leaf] = chain.passing_over(self.e, leaf)
        return found

    def dead(self, info: QuotaNodeInfo, shape: Shape) -> bool:
        """Whether ``shape`` neither fits ``info``'s quota nor asks within its guarantee."""
        known = self.dead_shapes.get(info.path)
        if known is not None and shape in known:
            return True
        if self.within(info, shape) or self.e.fits_quota(info.path, shape):
            return False
        if self.remembers:
            self.dead_shapes.setdefault(info.path, set()).add(shape)
        return True

    def within(self, info: QuotaNodeInfo, shape: Shape) -> bool:
        """``within_min`` of ``shape`` in ``info``, asked once until the leaf's usage changes."""
        known = self.within_shapes.get(info.path)
        if known is None:
            known = self.within_shapes[info.path] = {}
        found = known.get(shape)
        if found is None:
            found = known[shape] = self.e.within_min(info, shape)
        return found

    def admitted(self, leaf: QuotaPath) -> None:
        """The pass admitted into ``leaf``: what asks within its guarantee may have changed."""
        self.within_shapes.pop(leaf, None)

    def known_dead(self, leaf: QuotaPath, shape: Shape) -> bool:
        """Whether ``shape`` was found dead in ``leaf`` since usage last went down."""
        known = self.dead_shapes.get(leaf)
        return known is not None and shape in known

    def hopeless(self, info: QuotaNodeInfo, job: Job) -> bool:
        """Whether trying ``job`` would fail with nothing changed: a plain workload of a dead
        shape in a leaf that cannot preempt beyond its guarantee (no fit, no reclaim, R5)."""
        return (
            not job.held
            and job.scalable is None
            and not preempts_beyond_guarantee(info, job.shape)
            and self.dead(info, job.shape)
        )

    def forget(self) -> None:
        """Usage went down in the pass (a preemption, a hold let go): a dead shape may live."""
        self.dead_shapes = {}
        self.within_shapes = {}
