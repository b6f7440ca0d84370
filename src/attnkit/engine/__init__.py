"""The fan-out of a class to workers: the engine (``fan_out``), one worker's loop (``worker``) and the
messages between them.
"""
