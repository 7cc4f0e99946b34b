"""Zone served as a gate (Z2): a pass offers only the workloads it decides for.

What it does: shuts a waiting workload when no zone it accepts (its own, or one of its list,
Z2) is one this engine decides for and a dequeuer serves; says the zone is not served when
none of them is, else which dequeuer decides it.
What it must never do: look at capacity (fit is not a gate), or read a clock.
"""

from __future__ import annotations

from schemas import Reason
from usher.core.gates.view import AdmissionView, Gate, Opening
from usher.core.model import reasons
from usher.core.state.indexed import Job


def shuts(view: AdmissionView, job: Job) -> bool:
    return not view.decides_some_zone(job)


def reason(view: AdmissionView, job: Job) -> Reason:
    served = [zone for zone in (job.zones or (job.zone,)) if view.serves(zone)]
    if not served:
        return reasons.zone_not_served(job.zone, view.served_zones())
    return reasons.not_yet_evaluated(f"decided by the dequeuer of zone {served[0]}")


def opens(view: AdmissionView, job: Job) -> Opening:
    zones = job.zones or (job.zone,)
    served = [zone for zone in zones if view.serves(zone)]
    if not served:
        return Opening(on=f"a dequeuer serves zone {' or '.join(zones)}")
    return Opening(on=f"the dequeuer of zone {served[0]} admits it")


GATE = Gate(
    name="Z2 zone served",
    says="no zone it accepts is one this engine decides for",
    shuts=shuts,
    reason=reason,
    opens=opens,
)
