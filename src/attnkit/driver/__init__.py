"""The trusted handle on a sandbox: the seed and zygotes it starts, one submission's sandbox
(``submission``), the swapped calls, the replies, resource usage, and the words of a refusal.
"""
