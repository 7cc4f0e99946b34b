"""The watcher: Usher's only contact with Kubernetes.

What it does: observes jobs, quota trees, priority classes and nodes and publishes them as
cluster events on the log; carries out ``Admitted``/``Preempted`` decisions on the jobs; keeps
Queue objects and the ElasticQuotaTree's usage status up to date (see ``services/README.md``).
What it must never do: decide admissions, or import another service.
"""
