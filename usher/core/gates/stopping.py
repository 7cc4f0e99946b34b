"""R7 victims stopping as a gate: a preempted workload is not offered until seen stopped.

What it does: shuts a pending workload preempted earlier whose pods were not seen stopped
yet (the ledger would refuse it), naming its preemptor. It *stands*: a pass still offers it
and it fails there, so under Block it keeps closing its queue, as a head that does not fit.
What it must never do: shut anything but a victim not seen stopped, or read a clock.
"""

from __future__ import annotations

from schemas import Reason
from usher.core.gates.view import AdmissionView, Gate, Opening
from usher.core.model import reasons
from usher.core.state.indexed import Job


def shuts(view: AdmissionView, job: Job) -> bool:
    return view.stopping_for(job.key) is not None


def reason(view: AdmissionView, job: Job) -> Reason:
    preemptor = view.stopping_for(job.key)
    assert preemptor is not None
    return reasons.victim_stopping(job.key, preemptor)


def opens(view: AdmissionView, job: Job) -> Opening:
    return Opening(on="its pods are seen stopped")


GATE = Gate(
    name="R7 victims stopping",
    says="it was preempted and is not seen stopped yet (R7)",
    shuts=shuts,
    reason=reason,
    opens=opens,
    stands=True,
)
