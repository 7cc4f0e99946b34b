"""G1 admission gates as a gate: a job is not admitted while any gate is listed on it.

What it does: a job annotated ``usher.io/admission-gated-by: a,b`` (parsed strictly by the
registry) waits until every listed gate is removed from the annotation -- Kueue's admission
gate, for whoever must look at a job first (a review, a security scan, a data copy). The gate
shuts it while any is left, naming the gates still closed; only an update of the job opens it.
Gates may be removed after creation, never added: ``observe`` keeps only gates the job
listed before (what the engine folds into its state), and ``added`` names the annotation when
an update lists one more (what the webhook refuses, 403 naming the field).
What it must never do: read a clock, open a gate nobody removed, or let an update add one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from schemas import FieldError, Reason, WorkloadKey
from usher.core.gates.view import AdmissionView, Gate, Opening
from usher.core.kinds.fields import error
from usher.core.model import reasons
from usher.core.state.indexed import Job
from usher.core.values.registry import ADMISSION_GATED_BY, ANNOTATIONS_PATH

ADDED_CODE = "gate-added"
"""The error code of an update that lists an admission gate the job did not list before."""


def observe(
    gated: dict[WorkloadKey, tuple[str, ...]], key: WorkloadKey, listed: Sequence[str]
) -> None:
    """Fold an observation of ``key`` listing ``listed`` into ``gated`` (the state's map): it
    keeps the gates it listed before that it still lists, in order; one listed anew is not a
    gate (it was added after creation: the webhook refuses such an update, and a job that
    slipped through does not close again). None left: it is no longer gated."""
    before = gated.get(key, ())
    still = tuple(gate for gate in listed if gate in before)
    if still:
        gated[key] = still
    else:
        gated.pop(key, None)


def added(old_annotations: object, new_annotations: object) -> FieldError | None:
    """Why an update from ``old_annotations`` to ``new_annotations`` is refused: it lists an
    admission gate the old object did not (gates may only be removed); None otherwise. A value
    that does not parse lists nothing (the watcher refuses the job for it)."""
    before = _listed(old_annotations)
    after = _listed(new_annotations)
    new = [gate for gate in after if gate not in before]
    if not new:
        return None
    message = (
        f"admission gates may be removed after creation, never added: {', '.join(new)} "
        "was not listed before"
    )
    return error(f"{ANNOTATIONS_PATH}.{ADMISSION_GATED_BY.key}", ADDED_CODE, message)


def _listed(annotations: object) -> list[str]:
    if not isinstance(annotations, Mapping):
        return []
    return ADMISSION_GATED_BY.read(annotations) or []


def shuts(view: AdmissionView, job: Job) -> bool:
    return job.key in view.state.gated


def reason(view: AdmissionView, job: Job) -> Reason:
    return reasons.admission_gated(view.state.gated[job.key])


def opens(view: AdmissionView, job: Job) -> Opening:
    gates = view.state.gated[job.key]
    return Opening(on=f"{', '.join(gates)} {'is' if len(gates) == 1 else 'are'} removed from it")


GATE = Gate(
    name="G1 admission gates",
    says="admission gates are still listed on it (G1)",
    shuts=shuts,
    reason=reason,
    opens=opens,
)
