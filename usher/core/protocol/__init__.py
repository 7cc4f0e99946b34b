"""The log's protocol: one entry as every reader sees it, the subjects, and who may say what.

It holds no state and decides no admission.
"""
