"""What enters the log: a job manifest of any supported kind read, strictly and once, into the
typed ``WorkloadObserved`` fact (its pod sets, priority, zones, retries, runtime).

It decides no admission and keeps no state.
"""
