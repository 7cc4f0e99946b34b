"""The quota tree and its zones: parsing an ElasticQuotaTree, walking it, zone lists, zone
quota, burst zones and their tolerations, and a job's ordered zone fallback.

It never looks at workloads' state or makes a decision.
"""
