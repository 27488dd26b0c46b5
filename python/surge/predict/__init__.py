"""Walltime and node-allocation prediction for Surge (``surge predict``).

Learns job walltimes from batch history (:mod:`.traces`, :mod:`.features`, :mod:`.models`,
evaluated time-ordered in :mod:`.evaluate`), simulates the batch scheduler to measure how early
each job's node list is known (:mod:`.simulate`), and advises whether a job's input can be
staged onto its nodes before it starts (:mod:`.advise`). The command line is :mod:`.cli`.
"""
