"""The trusted pytest side: the plugin that runs a hidden suite against a submission, the ``student``
proxy, providers, markers, outcomes, charges, diagnosis and the scope of a swap.
"""
