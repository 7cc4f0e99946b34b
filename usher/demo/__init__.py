"""The demo of ``usher up``: kube-queue's walkthrough's tree and three scenarios, then a load.

What it does: ships a copy of kube-queue's walkthrough's ElasticQuotaTree and PriorityClasses (so a
clean clone needs nothing from outside the repository) and ``DemoDriver``, which applies them
through the Kubernetes API and plays, as a person would with ``usher submit``: the walkthrough's
scenario 1 (two 60-cpu jobs, the second waits), scenario 2 (a priority-2 job heads the queue) and
scenario 3 (Department-a borrows the whole cluster, Department-b reclaims its guarantee), before
them a small Department-c whose CPU budget one job spends, after which the next waits with
``BudgetExhausted`` (``usher.demo.budget``, B1) and, with fair share on, two teams of weights 1 and
3 competing for 12 cpu (``usher.demo.fairshare``, F1), then a steady mixed workload from every
department (seeded randomness, priorities, zones) and now and then a reclaim burst, sized from the
tree's usage (``reclaim_burst``) so that it is admitted by preempting a borrower. Every job carries
``usher.io/sim-duration`` so the fake kubelet finishes it. Restarting resumes: what exists is left
alone, names are generated. What it must never do: talk to anything but the Kubernetes API (through
the client), or submit without bound (it holds back while the backlog is long).
"""

from usher.demo.driver import DEMO_FILES, DemoDriver, demo_file

__all__ = ["DEMO_FILES", "DemoDriver", "demo_file"]
